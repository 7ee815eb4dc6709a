//! What a run writes: the `limits/<service>.yaml` files ([`limits_file`]), the pull
//! request's description ([`pr_description`]), the commit to the git config store
//! ([`git_store`]), the pull request on GitHub ([`github`]), the config sent to the GRL
//! controllers ([`to_controllers`]), and what follows a commit ([`deliver`]).

pub mod deliver;
pub mod git_store;
pub mod github;
pub mod limits_file;
pub mod pr_description;
pub mod to_controllers;
