#!/usr/bin/env bash
# run_tests: cores 1.0, 1 s
# The tensor-parallel layout of model/ (model_tp_check, build_layout_tp, the TP views, init and
# llm.c files at tp): dev/test/test_tp_layout.c. test_asan.sh runs it under the sanitizers too.
set -u
build/test_tp_layout "$TEST_TMP"
