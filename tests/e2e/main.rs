mod harness_smoke;
mod deploy_assets;
mod rlc_run;
