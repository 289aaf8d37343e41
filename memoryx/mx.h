/* memoryx: the weights and optimizer state of its shard of a job's
 * parameter tensors, the weight stream of every step in the order of the
 * static schedule, the optimizer step as each reduced gradient completes,
 * and checkpoints. A Pipelined job's weights are streamed once; its
 * replicas apply the updates, and the first sends its weights and
 * optimizer state up for each checkpoint. */
#pragma once

#include "node.h"
#include "store.h"

/* Fills the role table of memoryx and ties mx (cleared) to n: its option
 * keys point into mx->opt, set to the defaults; its job life cycle is
 * mx->jobs. */
void memoryx_role(node_role *role, memoryx *mx, node *n);
