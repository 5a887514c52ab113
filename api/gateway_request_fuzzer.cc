// libFuzzer target: any bytes as the body of a JSON gateway request. The
// bounded parser must never crash, take long or leak; a body it accepts
// must print back to JSON that it accepts again as the same message.
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "api/gateway.pb.h"
#include "api/gateway_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megastore::gateway;
  if (size < 1) return 0;
  std::unique_ptr<google::protobuf::Message> request;
  switch (data[0] % 5) {
    case 0:
      request = std::make_unique<GetRequest>();
      break;
    case 1:
      request = std::make_unique<QueryRequest>();
      break;
    case 2:
      request = std::make_unique<ReadQueueRequest>();
      break;
    case 3:
      request = std::make_unique<CommitAcrossRequest>();
      break;
    default:
      request = std::make_unique<CommitRequest>();
      break;
  }
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  if (!ParseRequest(body, request.get()).ok()) return 0;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(*request, &json).ok())
    return 0;  // e.g. a NaN value
  std::unique_ptr<google::protobuf::Message> again(request->New());
  if (!ParseRequest(json, again.get(), 1000).ok()) std::abort();
  // Compared as messages: a Struct's map has no fixed serialized order.
  if (!google::protobuf::util::MessageDifferencer::Equals(*again, *request)) std::abort();
  return 0;
}
