/* `appliance-submit --plan JOB.toml --wafer-memory SIZE`: the plan's first
 * answers without a cluster: what a replica needs in each mode, whether it
 * fits the wafer, the largest batch at the job's input and the largest
 * square input at the job's batch, and the memory table per layer. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "jobspec.h"

/* Compiles the job file `file` (its text in text) and prints the answers
 * for wse-nodes of wafer bytes and `threads` threads whose spill
 * directories have spill_room bytes free (UINT64_MAX: what this host's
 * TMPDIR, or /tmp, has), as text or JSON. Returns the process exit code:
 * 0, or 1 with the job file's error. */
#define OFFLINE_SPILL_ROOM_HERE UINT64_MAX
int offline_plan(const char *file, const char *text, jobspec_format format, uint64_t wafer,
                 int threads, uint64_t spill_room, bool json);
