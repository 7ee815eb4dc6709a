//! The README's first command, `rlc-demo` (`rlc demo`), run as a process: its own summary
//! must hold, and so must its staged rollout (`--rollout`).

mod demo;
mod demo_rollout;
