//! The feedback-loop engine shared by aggregators and controllers: a [`node::Node`] (every
//! operation of a tier: reports in, the tick, the report up, the parent's instructions;
//! its config in [`node_config`], what its lock guards in `state`), its children ([`child`],
//! [`children`], a child's rates summed once per report in [`child_rates`]) and which of their
//! reports it takes ([`admission`]); the rules of the config in force ([`rules`]); the ratio
//! arithmetic ([`ratios`]) and the tick worked by bucket index ([`dense_tick`]); which scopes
//! the tier computes ([`scopes`]); how a bucket's limit is parted among its priority classes
//! ([`priorities`]); whether it leads ([`leadership`]); what comes from the
//! parent (kept in `parent_state`, taken in by `parent`) and how long it holds ([`hold`]);
//! and the instructions out to the children (`instruct`, made from `instruct_inputs`,
//! packed by [`packing`]).
//!
//! No sockets here: the roles in [`super`] feed it reports and carry its instructions.

pub mod admission;
pub mod child;
pub mod child_rates;
pub mod children;
pub mod dense_tick;
pub mod hold;
mod instruct;
mod instruct_inputs;
pub mod leadership;
pub mod node;
pub mod node_config;
pub mod packing;
mod parent;
mod parent_state;
pub mod priorities;
pub mod ratios;
pub mod rules;
pub mod scopes;
mod state;
