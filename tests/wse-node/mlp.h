/* The small MLPs the wse-node's unit tests compile (test_sim.c,
 * test_wslots.c, test_wresident.c), and their compile step. */
#pragma once

#include "model.h"

/* 4 inputs, fc1 (8 units), a relu r1: the start both MLPs share. */
#define MLP_HEAD                                                                                   \
    "[model]\n"                                                                                    \
    "input_shape = [4]\n"                                                                          \
    "loss = \"softmax_cross_entropy\"\n"                                                           \
    "[[model.layers]]\nname = \"fc1\"\ntype = \"dense\"\nunits = 8\n"                              \
    "[[model.layers]]\nname = \"r1\"\ntype = \"relu\"\n"

/* Tensors 0 fc1.weight (8x4), 1 fc1.bias, 2 fc2.weight (6x8), 3 fc2.bias,
 * 4 fc3.weight (3x6), 5 fc3.bias. */
#define MLP3                                                                                       \
    MLP_HEAD "[[model.layers]]\nname = \"fc2\"\ntype = \"dense\"\nunits = 6\n"                      \
             "[[model.layers]]\nname = \"fc3\"\ntype = \"dense\"\nunits = 3\n"

/* Tensors 0 fc1.weight (8x4), 1 fc1.bias (8), 2 fc2.weight (3x8), 3 fc2.bias (3). */
#define MLP2 MLP_HEAD "[[model.layers]]\nname = \"fc2\"\ntype = \"dense\"\nunits = 3\n"

/* The model of the job text `text` (a [model] table), compiled; the test
 * fails on an error. The caller frees it (model_free). */
model *mlp_compile(const char *text);
