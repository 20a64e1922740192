//! The cluster tier of tiers.
