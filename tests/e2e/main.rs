mod dashboard_data;
mod demo;
mod deploy;
mod harness_smoke;
mod rlc_run;
