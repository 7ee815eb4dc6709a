mod dashboard_data;
mod demo;
mod deploy_assets;
mod harness_smoke;
mod rlc_run;
