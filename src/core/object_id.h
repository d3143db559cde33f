// Fresh ids for the objects replies name (tool calls an agent sends back, messages, responses).
#pragma once

#include <string>
#include <string_view>

namespace fak {

// prefix + 24 hex digits ("call_...", "msg_...", "toolu_...", "resp_..."): unique in the process
// and unlikely to repeat across restarts.
std::string new_object_id(std::string_view prefix);

}  // namespace fak
