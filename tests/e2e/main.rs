mod harness_smoke;
