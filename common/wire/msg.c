/* Names of the protocol's enums for people. */
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
