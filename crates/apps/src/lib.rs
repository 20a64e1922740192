//! Applications built on tiers.
