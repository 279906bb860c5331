#!/usr/bin/env bash
# run_tests: cores 0.1, 1 s
# The atomic file write every writer uses (util/atomic_file.h): dev/test/test_atomic_file.c.
set -u
build/test_atomic_file "$TEST_TMP"
