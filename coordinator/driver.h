/* The job driver (driver.c): members' reports about the running job. */
#pragma once

#include "members.h" /* member */
#include "node.h"

typedef struct coordinator coordinator;

/* A member registered: a recovering job may go on, a queued job start. */
void driver_member_joined(coordinator *co);
/* A member the running job uses is lost: the job recovers (or fails). */
void driver_member_lost(coordinator *co, member *mb);
void driver_handle_ready(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
void driver_handle_step_report(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload,
                               uint32_t len);
void driver_handle_step_committed(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload,
                                  uint32_t len);
void driver_handle_eval_report(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload,
                               uint32_t len);
void driver_handle_finished(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload,
                            uint32_t len);
void driver_handle_abort(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload,
                         uint32_t len);
void driver_handle_checkpoint(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload,
                              uint32_t len);
