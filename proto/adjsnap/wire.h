// adjsnapd data-plane wire format, version 4.
//
// A data-plane message is a UCX active message (ucp_am_send_nbx), or, on a session socket
// (below), the same header after a SocketFrame. Its *header* is one of
// the fixed-size structs below; snapshot bytes travel as the AM *data* (eager for small
// messages, rendezvous otherwise, so large snapshots cross with at most one copy). All
// integers are little-endian; structs are packed by construction (only 8-byte fields after an
// 8-byte header) and their sizes are part of the format.
//
//  AM id          header         data            direction   meaning
//  kHello         HelloRequest   none            client->d   confirm the endpoint's session
//  kPush          PushRequest    snapshot bytes  client->d   store step `step` of `run_id`
//  kFetch         FetchRequest   none            client->d   send step `step` of `run_id`
//  kReply         Reply          none / bytes    d->client   completes request `request_id`
//  kReserve       PushRequest    none            client->d   mapped push, phase 1 (below)
//  kCommit        PushRequest    none            client->d   mapped push, phase 2
//  kFetchMapped   FetchRequest   none            client->d   mapped fetch: lease the block
//  kReleaseLease  LeaseRelease   none            client->d   mapped fetch done; no Reply
//  kAbort         PushRequest    none            client->d   mapped push abandoned after
//                                                            kReserve (its copy failed)
//
// Copied push: answered by one Reply once the snapshot is *stored* (in its tier and in the
// catalog) or rejected; the client's own send completion is the *released* phase. Copied
// fetch: one Reply whose data are the snapshot bytes (code 0) or empty (error).
//
// Session socket: a client that maps its uid's arena opens its session without a UCX
// address (OpenSessionRequest.ucx_address empty) and asks the arena socket for the arena;
// that connection, authenticated by the session's id and token and by SO_PEERCRED, then stays
// open as the session's link: the mapped path's messages (IsMappedPath) go over it, each one
// SocketFrame then its header struct, and their Replies come back the same way (no AM data
// ever: kPush, kFetch and kHello are refused there). Closing it ends the session. Such a client
// needs no UCX endpoint, and so adjsnapd no network transport (docs/operations.md, "Ports").
//
// Mapped path (same node): the client holds its uid's host-tier arena mapped (its memfd
// arrives over the arena socket, ArenaRequest/ArenaReply below). kReserve reserves
// the step and tier memory and answers with Reply.offset; the client copies its snapshot to
// arena + offset (the one CPU copy; *released*), then kCommit records it (*stored* on Reply).
// kFetchMapped answers with the block's offset and pins the block under lease `request_id`
// until kReleaseLease; the client copies out of the arena. A client whose copy into the arena
// could not start sends kAbort instead of kCommit: the reservation and its memory are freed,
// answered by a Reply. A link (endpoint or session socket) that goes away aborts its
// reservations and drops its leases. With host_arenas = "shared" the mapped-path messages
// (IsMappedPath below) are refused, PERMISSION_DENIED, from a session whose uid is not root
// or adjsnapd's own: only those uids receive the shared arena's memfd.
// Any message whose header size, magic, version or token is wrong is dropped and counted;
// when it carries a plausible request_id it is answered with an error Reply. A message with
// an AM id not listed above, or on an endpoint that no session created, is dropped, counted
// and logged (rate-limited), never answered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace adjsnap::wire {

inline constexpr uint32_t kMagic = 0x50414E53;  // "SNAP" in little-endian bytes
// Version 4: kCommit carries the checksum of the bytes the client copied (PushRequest).
// Version 3: mapped clients speak over their session socket, with no UCX endpoint.
// Version 2: endpoints are created from worker addresses exchanged in OpenSession (no
// listener); version 1 clients connected to an IP:PORT.
inline constexpr uint16_t kVersion = 4;
inline constexpr size_t kMaxReplyMessage = 232;

enum AmId : uint16_t {
  kHello = 1,
  kPush = 2,
  kFetch = 3,
  kReply = 4,
  kReserve = 5,
  kCommit = 6,
  kFetchMapped = 7,
  kReleaseLease = 8,
  kAbort = 9,
};

// The messages of the mapped path: they name host-tier memory the client reads or writes
// itself, so adjsnapd admits them only from sessions whose uid may map the host tier.
constexpr bool IsMappedPath(uint16_t op) {
  return op == kReserve || op == kCommit || op == kFetchMapped || op == kReleaseLease ||
         op == kAbort;
}

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
  // the AM data length (kPush) or what the client wrote at the reserved offset (kCommit must
  // repeat kReserve's): the run's bytes_per_step, or, for a run of an nvCOMP codec, fewer
  // bytes that are a chunk frame (adjsnap/chunk_frame.h; checked when committed)
  uint64_t bytes;
  uint64_t copy_ns;  // kCommit: how long the client's copy into the arena took (0 = unknown)
  // kCommit with flags & kPushChecksum: the checksum (adjsnap/checksum.h) of the bytes the
  // client wrote, computed in the copy that wrote them; adjsnapd records it with the step and does
  // not read the step again to hash it. A client can only misstate its own step's checksum,
  // which it gets back as it wrote it. 0 otherwise, as are the other flags.
  uint64_t checksum;
  uint64_t flags;
};
inline constexpr uint64_t kPushChecksum = 1;

struct FetchRequest {
  Header header;
  uint64_t run_id;
  uint64_t step;
  uint64_t bytes;  // size of the caller's buffer; must equal the run's bytes_per_step
};

struct LeaseRelease {
  Header header;
  uint64_t lease;    // request_id of the kFetchMapped that took the lease
  uint64_t copy_ns;  // how long the client's copy out of the arena took (0 = unknown)
};

struct Reply {
  Header header;
  int32_t code;       // adjsnap::Code (gRPC status code numbering)
  uint32_t message_length;
  // Fetch: the step's bytes, carried as AM data (copied) or in the leased block (kFetchMapped):
  // the run's bytes_per_step, or fewer for a step stored as a chunk frame (adjsnap/chunk_frame.h;
  // the client decodes it). 0 otherwise.
  uint64_t bytes;
  uint64_t offset;    // arena offset of the block (kReserve, kFetchMapped)
  char message[kMaxReplyMessage];  // not NUL-terminated; message_length bytes are valid
};

// Arena socket (unix stream, path from OpenSession): the client sends one ArenaRequest; the
// daemon answers one ArenaReply, carrying the memfd of the caller's uid's arena (SO_PEERCRED)
// as SCM_RIGHTS when code is 0 (host_arenas = "shared": only to root and adjsnapd's uid). For a
// session opened without a UCX address the connection then stays open as its session socket.
struct ArenaRequest {
  uint64_t session_id;
  uint64_t token;
};

struct ArenaReply {
  int32_t code;
  uint32_t message_length;
  uint64_t arena_bytes;
  char message[kMaxReplyMessage];
};

// Session socket framing: `bytes` bytes of message (a header struct above, whose own op
// repeats `op`) follow. `reserved` is 0.
struct SocketFrame {
  uint16_t op;
  uint16_t bytes;
  uint32_t reserved;
};
// The largest message a session socket carries (a Reply); a frame announcing more ends it.
inline constexpr size_t kMaxSocketMessage = 512;
static_assert(std::is_trivially_copyable_v<Reply>);
static_assert(sizeof(SocketFrame) == 8);
static_assert(sizeof(Header) == 24);
static_assert(sizeof(HelloRequest) == 32);
static_assert(sizeof(PushRequest) == 72);
static_assert(sizeof(FetchRequest) == 48);
static_assert(sizeof(LeaseRelease) == 40);
static_assert(sizeof(Reply) == 280);
static_assert(sizeof(ArenaRequest) == 16);
static_assert(sizeof(ArenaReply) == 248);

inline Header MakeHeader(AmId op, uint64_t token, uint64_t request_id) {
  return Header{kMagic, kVersion, static_cast<uint16_t>(op), token, request_id};
}

}  // namespace adjsnap::wire
