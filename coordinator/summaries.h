/* TensorBoard summaries of a job: an event file in its model_dir
 * (events.out.tfevents.<time>.<host>), TFRecord-framed Event protobufs with
 * scalar values, readable by TensorBoard and by tensorflow's summary
 * iterators. Written by the coordinator, which sees every step. */
#pragma once

#include <stddef.h>
#include <stdint.h>

typedef struct summaries summaries;

/* Creates the event file in dir (created if needed). Returns NULL with a
 * message in err. */
summaries *summaries_open(const char *dir, char *err, size_t errlen);
/* Appends one scalar; the file is flushed by summaries_flush. Returns 0 or
 * a negative errno (the writer then stops writing). */
int summaries_scalar(summaries *s, const char *tag, int64_t step, double value);
void summaries_flush(summaries *s);
void summaries_close(summaries *s);
/* The event file's path. */
const char *summaries_path(const summaries *s);
