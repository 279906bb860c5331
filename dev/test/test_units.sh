#!/usr/bin/env bash
# run_tests: cores 0.8, 4 s
# Library unit tests: shard arithmetic, the model families' tensor tables, the data loader, the
# top-k sampler, the run-directory lock, the stop signals' two phases, TensorBoard's event
# encoding (CRC32C, TFRecord framing) and llm.c's eval files (HellaSwag: writer, reader, refusals).
set -u
build/test_flat_unit
build/test_model_tables
build/test_loader "$TEST_TMP"
build/test_sampler
build/test_run_lock "$TEST_TMP"
build/test_signals "$TEST_TMP"
build/test_tb_events
build/test_evalset "$TEST_TMP"
