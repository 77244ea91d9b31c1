#!/bin/bash
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=$PWD/lib:$LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "=== fa_check"; timeout 90 ./fa_check; echo "rc=$?"
echo "=== gtest"; timeout 150 ./gpu_model_test --gtest_filter='GpuFlashAttention.*:GpuModel.*:GpuLayers.Attention*' 2>&1 | grep -v "^seed\|^step " | tail -40; echo "rc=${PIPESTATUS[0]}"
echo "=== bench"
timeout 60 ./gpt_bench --attention matmul --steps 10 --warmup 2; echo "rc=$?"
timeout 60 ./gpt_bench --attention flash --steps 10 --warmup 2; echo "rc=$?"
