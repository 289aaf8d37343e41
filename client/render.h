/* How appliance-submit shows things: the member table, plans, job status
 * lines (a live line on a terminal, timestamped lines otherwise), lists of
 * jobs, final results, and the same as JSON. */
#pragma once

#include <stdbool.h>
#include <stdio.h>

#include "envelope.pb-c.h"

void render_json_string(FILE *f, const char *s);
void render_cluster(const Appliance__ClusterInfo *info, bool json);
void render_plan(const Appliance__Plan *p);
/* The line that says what a plan keeps for the backward pass: every output
 * (Plan.keep_outputs), every costly one (Plan.keep_costly), or less. */
const char *render_keep_outputs(bool keep, bool costly);
/* The line that says a plan holds one batch in flight to each wse-node
 * rather than two (Plan.feed_credits 1). */
const char *render_feed_credits(unsigned credits);
/* The end of a job: a summary (stdout for done, stderr otherwise), or JSON. */
void render_final(const Appliance__JobStatus *st, bool json);
/* One job's status as a JSON object (no newline). */
void render_status_json(const Appliance__JobStatus *st);
/* A progress update: on a terminal one line rewritten in place, else a
 * timestamped line. */
void render_progress(const Appliance__JobStatus *st, bool tty);
/* Ends a live line on a terminal before other output. */
void render_progress_done(bool tty);
/* Durations as "1h02m", "3m05s", "12.3s". */
const char *render_duration(double secs, char *buf, size_t len);
void render_list(const Appliance__JobList *l, bool json);
/* "processor avx2: blocked groups of 8 channels (aBcd8b), mixed precision
 * in float32": what a wse-node's processor (its registration's isa,
 * conv_block and bf16) makes of a job's layers, into buf. */
const char *render_processor(const char *isa, uint32_t block, bool bf16, char *buf, size_t len);
