#!/bin/bash
# Llama 3 8B pre-training with Megatron-LM on one node of 8 GPUs: tp 2, pp 2, dp 2, mock data.
# memform reads it as Megatron-LM reads its arguments:
#   memform estimate docs/megatron/llama3_8b.sh --gpu h100-80g
export CUDA_DEVICE_MAX_CONNECTIONS=1

MODEL_ARGS=(
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length 8192
    --max-position-embeddings 8192
    --position-embedding-type rope
    --normalization RMSNorm
    --swiglu
    --disable-bias-linear
    --untie-embeddings-and-output-weights
    --hidden-dropout 0.0
    --attention-dropout 0.0
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 128
    --train-iters 1000
    --lr 3.0e-4 --min-lr 3.0e-5 --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0
    --bf16
    --use-distributed-optimizer
    --overlap-grad-reduce --overlap-param-gather
)
PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 2
    --sequence-parallel
)
DATA_ARGS=(
    --mock-data
    --tokenizer-type NullTokenizer
    --vocab-size 128256
)

torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \
    "${MODEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" \
    "${PARALLEL_ARGS[@]}" \
    "${DATA_ARGS[@]}" \
    --log-interval 10 --save-interval 1000 --eval-interval 1000 --eval-iters 10
