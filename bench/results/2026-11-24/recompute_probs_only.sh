#!/bin/bash
cd /work/main
L=bench/results/2026-11-24/recompute_attention_llama.yaml
for round in 1 2 3; do
  for shape in llama gpt2; do
    if [ $shape = llama ]; then A="--arch llama --config $L"; else A="--arch gpt2 --config small"; fi
    for v in old_on new_on new_off; do
      bin=/tmp/bench-bin/${v%_*}_bts
      flag=""; [ ${v#*_} = on ] && flag="--recompute-attention"
      echo "round=$round shape=$shape run=$v $($bin $A --threads 2 --steps 4 --warmup 1 --no-breakdown --cpu-attention full $flag 2>&1 | grep RESULT)"
    done
  done
done
