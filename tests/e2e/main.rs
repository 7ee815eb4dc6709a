mod demo;
mod deploy_assets;
mod harness_smoke;
mod rlc_run;
