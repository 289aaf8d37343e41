/* wse-node: the role of a replica: one replica of a job. It receives the
 * weights of each step from its swarmx parent straight into its weight
 * buffers, the batches of its share from its input workers (on credit),
 * computes each layer off the event loop as soon as what it needs is there,
 * and sends its gradients up in chunks as each layer's backward pass
 * completes. Every buffer is sized from the plan at job start: no
 * allocation per step. (wjob.h: the job, internal.) */
#pragma once

#include "node.h"
#include "wse_node.h"

/* Fills the role table of a wse-node and ties w (cleared) to n: its option
 * keys point into w->opt, set to the defaults; its job life cycle is
 * w->jobs. */
void wse_node_role(node_role *role, wse_node *w, node *n);

/* --spill-dir: whether dir takes an unnamed file (the spill file of a job
 * that needs one); 0 with its free room formatted in room, or a negative
 * errno with err naming the directory and the reason. */
int wn_spill_dir_check(const char *dir, char *room, size_t roomlen, char *err, size_t errlen);

