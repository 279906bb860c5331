#!/usr/bin/env bash
# run_tests: shares the machine
# The atomic file write every writer uses (util/atomic_file.h): dev/test/test_atomic_file.c.
set -u
build/test_atomic_file "$TEST_TMP"
