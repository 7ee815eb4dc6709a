//! The helpers themselves against the real programs they drive.

mod harness;
