/* Names of the protocol's enums, and a peer's text, for people. */
#include "msg.h"

const char *msg_role_name(Appliance__Role r)
{
    switch (r) {
    case APPLIANCE__ROLE__ROLE_COORDINATOR: return "coordinator";
    case APPLIANCE__ROLE__ROLE_MEMORYX: return "memoryx";
    case APPLIANCE__ROLE__ROLE_SWARMX: return "swarmx";
    case APPLIANCE__ROLE__ROLE_WORKER: return "worker";
    case APPLIANCE__ROLE__ROLE_WSE_NODE: return "wse-node";
    case APPLIANCE__ROLE__ROLE_CLIENT: return "client";
    default: return "unknown";
    }
}

const char *msg_job_state_name(Appliance__JobState s)
{
    switch (s) {
    case APPLIANCE__JOB_STATE__JOB_QUEUED: return "queued";
    case APPLIANCE__JOB_STATE__JOB_RUNNING: return "running";
    case APPLIANCE__JOB_STATE__JOB_DONE: return "done";
    case APPLIANCE__JOB_STATE__JOB_FAILED: return "failed";
    case APPLIANCE__JOB_STATE__JOB_CANCELLED: return "cancelled";
    default: return "unknown";
    }
}

const char *msg_member_state_name(Appliance__MemberState s)
{
    switch (s) {
    case APPLIANCE__MEMBER_STATE__MEMBER_ALIVE: return "alive";
    case APPLIANCE__MEMBER_STATE__MEMBER_BUSY: return "busy";
    case APPLIANCE__MEMBER_STATE__MEMBER_LOST: return "lost";
    case APPLIANCE__MEMBER_STATE__MEMBER_GONE: return "gone";
    default: return "unknown";
    }
}

void msg_printable(char *dst, size_t len, const char *src)
{
    size_t i = 0;
    for (; src && src[i] && i + 1 < len; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[i] = ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\' ? '?' : (char)ch;
    }
    if (len)
        dst[i] = 0;
}
