// snapd UCX data-plane wire format, version 1.
//
// Every data-plane message is a UCX active message (ucp_am_send_nbx). Its *header* is one of
// the fixed-size structs below; snapshot bytes travel as the AM *data* (eager for small
// messages, rendezvous otherwise, so large snapshots cross with at most one copy). All
// integers are little-endian; structs are packed by construction (only 8-byte fields after an
// 8-byte header) and their sizes are part of the format.
//
//  AM id        header            data            direction   meaning
//  kHello       HelloRequest      none            client->d   bind this endpoint to a session
//  kPush        PushRequest       snapshot bytes  client->d   store step `step` of `run_id`
//  kFetch       FetchRequest      none            client->d   send step `step` of `run_id`
//  kReply       Reply             none / bytes    d->client   completes request `request_id`
//
// A push is answered by one Reply once the snapshot is *stored* (in its tier and in the
// catalog) or rejected; the client's own send completion is the *released* phase. A fetch is
// answered by one Reply whose data are the snapshot bytes (code 0) or empty (error).
// Any message whose header size, magic, version or token is wrong is dropped and counted;
// when it carries a plausible request_id it is answered with an error Reply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace snapd::wire {

inline constexpr uint32_t kMagic = 0x50414E53;  // "SNAP" in little-endian bytes
inline constexpr uint16_t kVersion = 1;
inline constexpr size_t kMaxReplyMessage = 232;

enum AmId : uint16_t {
  kHello = 1,
  kPush = 2,
  kFetch = 3,
  kReply = 4,
};

struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t op;          // AmId, repeated so a header is self-describing in captures
  uint64_t token;       // session token from OpenSession (0 in Reply)
  uint64_t request_id;  // chosen by the client, unique per endpoint; echoed in Reply
};

struct HelloRequest {
  Header header;
  uint64_t session_id;
};

struct PushRequest {
  Header header;
  uint64_t run_id;
  uint64_t step;
  uint64_t bytes;  // must equal the run's bytes_per_step and the AM data length
};

struct FetchRequest {
  Header header;
  uint64_t run_id;
  uint64_t step;
  uint64_t bytes;  // size of the caller's buffer; must equal the run's bytes_per_step
};

struct Reply {
  Header header;
  int32_t code;       // snapd::Code (gRPC status code numbering)
  uint32_t message_length;
  uint64_t bytes;     // bytes carried as AM data (fetch) or stored (push)
  char message[kMaxReplyMessage];  // not NUL-terminated; message_length bytes are valid
};

static_assert(std::is_trivially_copyable_v<Reply>);
static_assert(sizeof(Header) == 24);
static_assert(sizeof(HelloRequest) == 32);
static_assert(sizeof(PushRequest) == 48);
static_assert(sizeof(FetchRequest) == 48);
static_assert(sizeof(Reply) == 272);

inline Header MakeHeader(AmId op, uint64_t token, uint64_t request_id) {
  return Header{kMagic, kVersion, static_cast<uint16_t>(op), token, request_id};
}

}  // namespace snapd::wire
