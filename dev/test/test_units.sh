#!/usr/bin/env bash
# Library unit tests: shard arithmetic and the data loader.
set -u
build/test_flat_unit
build/test_loader "$TEST_TMP"
