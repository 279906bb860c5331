#!/usr/bin/env bash
# run_tests: cores 0.1, 1 s
# The FSDP engine's schedule (prefetch, waits, reduce-scatter placement), read from the log of
# a recording backend: one process playing one rank of four, no MPI launcher needed.
set -u
build/test_fsdp_schedule
