/* What the web page shows of a job beyond its status: the loss and rate of
 * its committed steps, its evaluations, and the memory plan of each of its
 * wse-nodes as buffers against the wafer's size. Kept in the job (job.h)
 * from its first step until it is freed; bounded (JOBVIEW_POINTS_MAX). */
#pragma once

#include "job.h"
#include "members.h"

#define JOBVIEW_POINTS_MAX 20000 /* steps kept; past it, every other one goes */
#define JOBVIEW_EVALS_MAX 4096   /* evaluations kept; past it, the newest are dropped */

/* Records a committed step. A step at or before the last one recorded (an
 * attempt resumed from a checkpoint) replaces the points from there on. */
void jobview_record_step(job *j, const job_point *pt);
/* Records an evaluation's result (a repeated step replaces it). */
void jobview_record_eval(job *j, const job_eval_point *e);

/* The memory plan of each wse-node of plan p (compiled from spec, on the
 * members ms) as JSON: per replica, its member, the wafer's size, what it
 * needs, and the buffers that make that up, each with what it holds.
 * Returns a malloc'd string, or NULL when out of memory. */
char *jobview_plan_json(const jobspec *spec, const Appliance__Plan *p, members *ms);

/* Frees what the job keeps for the page. */
void jobview_free(job *j);
