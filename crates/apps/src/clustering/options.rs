//! The settings of a clustering run: which procedure, how its inner loops run, and the
//! annealing's parameters, with the checks that keep a run finite.

/// Which annealing procedure [`da_pwc`](super::da_pwc) follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Method {
    /// tiers' own schedule (the module documentation): mass-constrained memberships, start at
    /// the first critical temperature, split test at every temperature.
    #[default]
    Tiers,
    /// SPIDAL's DA-PWC procedure as its fungi configuration runs it: memberships without cluster
    /// priors, start at twice the mean distance, split tests weighted by the memberships on an
    /// exactly duplicated cluster every `wait_temperatures + 1` temperatures, a final freezing
    /// stage (see [the module documentation](super#spidal-mode)).
    Spidal,
}

/// How the clustering's inner loops (the product δ·M, the memberships' partial sums and their
/// update) are run on a rank's threads: \[Qiu2012\] compares both on the same clustering. Both
/// give the same bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Style {
    /// Loops of the node tier's pool (`for_each` over row blocks), as TPL's `Parallel.For`.
    #[default]
    Loop,
    /// Message-driven, as CCR's ports: worker 0 posts blocks of rows to the workers' ports
    /// and gathers the results (rows, partial sums) from its own.
    Messages,
}

impl Style {
    /// `loop` or `messages`.
    pub fn parse(s: &str) -> crate::Result<Style> {
        match s {
            "loop" => Ok(Style::Loop),
            "messages" => Ok(Style::Messages),
            _ => Err(crate::Error::Invalid(format!(
                "unknown style {s:?}: use loop or messages"
            ))),
        }
    }
}

/// DA-PWC settings (defaults from SPIDAL's fungi run).
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// The annealing procedure.
    pub method: Method,
    /// Most clusters (SPIDAL MaxNcent).
    pub max_clusters: usize,
    /// Cooling factor while clusters are still splitting (InitialCoolingFactor; SPIDAL uses it
    /// only before the first split).
    pub cooling: f64,
    /// Cooling factor once `max_clusters` is reached (FineCoolingFactor; SPIDAL uses it from the
    /// first split on).
    pub fine_cooling: f64,
    /// Tiers: stop when the mean membership uncertainty Σ_k M(1−M) per point is below this.
    /// Spidal: stop when every cluster's Σ_i M(1−M)/C(k) is at most this (FreezingLimit).
    pub freezing: f64,
    /// Tiers: a temperature's EM stops when no ε_i(k) moved by more than this times the mean
    /// distance. Spidal: when no cluster's mean |Δε_i(k)| over the points exceeds this
    /// (EpsiMaxChange).
    pub epsi_change: f64,
    /// EM iterations allowed per temperature (ConvergenceLoopLimit).
    pub em_limit: usize,
    /// Tiers: split when (T − λ)/T is below this. Spidal: split when the least eigenvalue of the
    /// second-derivative matrix is at most this times its largest (MinEigTest).
    pub min_eig: f64,
    /// Clusters smaller than this never split (TooSmallToSplit).
    pub too_small: f64,
    /// Power-method iteration limit (PowerIterationLimit).
    pub power_limit: usize,
    /// Power method stops when the eigenvalue changes by less than this, relatively
    /// (EigenValueChange).
    pub eig_change: f64,
    /// Spidal: the power method also needs ‖Hx − λx‖² ≤ this · λ² (EigenVectorChange).
    pub eig_vector_change: f64,
    /// Spidal: converged temperatures between split tests once there are two clusters or more
    /// (WaitIterations).
    pub wait_temperatures: usize,
    /// Spidal: cooling factor of the final freezing stage (ConvergingCoolingFactor).
    pub converging_cooling: f64,
    /// Spidal: most temperatures in the final freezing stage (IterationAtEnd).
    pub iterations_at_end: usize,
    /// Spidal: EM iterations allowed for a duplicated cluster in the split test
    /// (EMlimit_Duplication).
    pub duplication_em_limit: usize,
    /// Spidal: clusters smaller than this are dropped at the end (minimumclustercount).
    pub min_cluster_size: f64,
    /// Most splits at one temperature (0: no limit). After a split the EM re-converges at the
    /// same temperature; with the default 1 the next split test waits for the next temperature,
    /// so a freshly split cluster is not split again before the system has cooled.
    pub splits_per_temperature: usize,
    /// How the inner loops run on the threads (the same bits either way).
    pub style: Style,
}

/// The most temperature steps a cooling factor may take to cool tenfold (a factor of at most
/// about 0.999977). SPIDAL's factors are 0.9-0.999 (22-2,300 steps per decade).
pub const MAX_STEPS_PER_DECADE: f64 = 100_000.0;

/// The largest cooling factor [`ClusterOptions::check`] accepts.
pub fn max_cooling() -> f64 {
    (-std::f64::consts::LN_10 / MAX_STEPS_PER_DECADE).exp()
}

impl ClusterOptions {
    /// Checks the options for a matrix of `n` points: [`check`](Self::check), no more
    /// clusters than points, and memberships that fit in memory.
    pub fn validate(&self, n: usize) -> crate::Result<()> {
        self.check()?;
        if self.max_clusters > n {
            return Err(crate::Error::Invalid(format!(
                "max clusters must be at most the number of points ({n}), not {}",
                self.max_clusters
            )));
        }
        crate::limits::check_alloc(
            "the memberships",
            crate::limits::mul("points x clusters", n, self.max_clusters.saturating_mul(4))?,
            8,
        )?;
        Ok(())
    }

    /// Checks the options on their own: at least one cluster, cooling factors strictly
    /// between 0 and 1 (1 or more never cools, so the annealing would not end) and cooling
    /// tenfold in at most [`MAX_STEPS_PER_DECADE`] steps, positive finite limits.
    pub fn check(&self) -> crate::Result<()> {
        let bad = |m: String| Err(crate::Error::Invalid(m));
        if self.max_clusters == 0 {
            return bad("max clusters must be at least 1".into());
        }
        for (name, v) in [
            ("cooling", self.cooling),
            ("fine cooling", self.fine_cooling),
            ("converging cooling", self.converging_cooling),
        ] {
            if !(v > 0.0 && v < 1.0) {
                return bad(format!(
                    "the {name} factor must be strictly between 0 and 1, not {v}"
                ));
            }
            // ln(0.1) / ln(v): the temperature steps to cool tenfold. Each step is at least
            // one EM pass over every point, so a factor a hair below 1 is a run that never
            // ends in practice; refuse it up front rather than after hours.
            let per_decade = std::f64::consts::LN_10 / -v.ln();
            if per_decade > MAX_STEPS_PER_DECADE {
                return bad(format!(
                    "the {name} factor {v} would take {per_decade:.3e} temperature steps to cool \
                     tenfold; at most {MAX_STEPS_PER_DECADE} are allowed (a factor of at most {:.7})",
                    max_cooling()
                ));
            }
        }
        for (name, v) in [
            ("freezing limit", self.freezing),
            ("epsilon change", self.epsi_change),
            ("eigenvalue change", self.eig_change),
            ("eigenvector change", self.eig_vector_change),
        ] {
            if !(v > 0.0 && v.is_finite()) {
                return bad(format!("the {name} must be a positive number, not {v}"));
            }
        }
        if !self.min_eig.is_finite() {
            return bad(format!(
                "the split test's eigenvalue threshold must be a number, not {}",
                self.min_eig
            ));
        }
        if !(self.too_small >= 0.0 && self.too_small.is_finite()) {
            return bad(format!(
                "the size below which clusters never split must be a number of points, not {}",
                self.too_small
            ));
        }
        if !(self.min_cluster_size >= 0.0 && self.min_cluster_size.is_finite()) {
            return bad(format!(
                "the minimum cluster size must be a number of points, not {}",
                self.min_cluster_size
            ));
        }
        if self.em_limit == 0 || self.power_limit == 0 {
            return bad("the EM and power-method iteration limits must be at least 1".into());
        }
        Ok(())
    }
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            method: Method::Tiers,
            max_clusters: 10,
            cooling: 0.9,
            fine_cooling: 0.99,
            freezing: 0.002,
            epsi_change: 0.001,
            em_limit: 2000,
            min_eig: -0.01,
            too_small: 5.0,
            power_limit: 200,
            eig_change: 0.001,
            eig_vector_change: 0.001,
            wait_temperatures: 10,
            converging_cooling: 0.98,
            iterations_at_end: 2000,
            duplication_em_limit: 200,
            min_cluster_size: 25.0,
            splits_per_temperature: 1,
            style: Style::Loop,
        }
    }
}

impl ClusterOptions {
    /// SPIDAL's procedure with its fungi configuration (`dapwc-config.properties`: MaxNcent 10,
    /// InitialCoolingFactor 0.9, FineCoolingFactor 0.99, MinEigTest −0.01, TooSmallToSplit 5,
    /// EpsiMaxChange 0.001, FreezingLimit 0.002, PowerIterationLimit 200, EigenValueChange and
    /// EigenVectorChange 0.001, WaitIterations 10, ConvergenceLoopLimit and IterationAtEnd 2000)
    /// and its built-in constants (ConvergingCoolingFactor 0.98, EMlimit_Duplication 200,
    /// minimumclustercount 25).
    pub fn spidal() -> Self {
        ClusterOptions {
            method: Method::Spidal,
            ..Default::default()
        }
    }
}
