#!/bin/bash
# Data-parallel scaling on this machine: one epoch of the full Fashion-MNIST, 1 and 2 replicas,
# balanced order.
R=${RECIPE:-target/release/recipe}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
for recipe in simclr moco_v2; do
  for n in 1 2 2 1; do
    d=run-$recipe-$n-$RANDOM
    line=$($R $recipe --epochs 1 --dataset fashion-mnist --data-dir $DATA --backbone small --run-dir $d --devices $n 2>&1 | grep "epoch 1/1")
    echo "$recipe devices=$n $line"
    rm -rf $d
  done
done
