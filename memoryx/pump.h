/* memoryx's weight stream: each step's chunks sent down the link to the
 * root swarmx (or the one replica) in the order of the stream cursor
 * (plan_stream.h), as fast as the link takes them, from the weights (their
 * bfloat16 twin) or from the disk tier's read-ahead buffers (tierio.h). A
 * chunk whose part is being updated waits for its update (update_busy).
 * What follows the stream's end is the job's driver's (mx.c): the pump
 * only says that it got there. */
#pragma once

#include <stdbool.h>

#include "store.h"

/* Puts the stream cursor (and the disk tier's read-ahead) at the start of
 * the stream of j->step. */
void pump_start(mx_job *j);

/* Sends the step's weight chunks while the link has room. Returns true
 * when it ran out of chunks or of a link, false when it stopped before: the
 * link is full (its drain resumes), a part is being updated (its return
 * does), a chunk is not read ahead yet (its read does), or the send failed
 * and the job with it. */
bool pump_send(mx_job *j);

/* Whether the weight stream of the step is still going. */
bool pump_streaming(const mx_job *j);
