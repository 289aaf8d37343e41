/* Building an Envelope around one message in one line, the names of the
 * protocol's enums, and text a peer sent made fit for our logs. */
#pragma once

#include <stddef.h>

#include "envelope.pb-c.h"

/* Declares `Appliance__Envelope var` carrying *ptr in oneof field `field`. */
#define ENVELOPE(var, field, CASE, ptr)                                                        \
    Appliance__Envelope var = APPLIANCE__ENVELOPE__INIT;                                       \
    var.msg_case = APPLIANCE__ENVELOPE__MSG_##CASE;                                            \
    var.field = (ptr)

/* The role's name for logs and listings ("wse-node"); a static string. */
const char *msg_role_name(Appliance__Role r);
/* A job's state as every listing, log and metric names it ("queued"). */
const char *msg_job_state_name(Appliance__JobState s);
/* A member's state as every listing, log and metric names it ("alive"). */
const char *msg_member_state_name(Appliance__MemberState s);

/* Copies text a peer sent (src may be NULL) for our logs and messages into
 * dst of len bytes: control characters, quotes and backslashes become '?',
 * so that a name cannot forge a log line. */
void msg_printable(char *dst, size_t len, const char *src);
