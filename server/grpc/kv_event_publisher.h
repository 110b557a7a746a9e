// Publishes the prefix cache's events (cache/kv_events.h) as vLLM does, so llm-d's precise
// prefix scorer and Dynamo's KV router can follow them unchanged: ZeroMQ PUB messages of
// three frames (topic, sequence number as 8 bytes big-endian, msgpack payload), each payload
// one engine step's KVEventBatch [timestamp, [event...]] with events encoded as vLLM's
// msgspec structs (array_like, tagged): ["BlockStored", [hash], parent hash or nil, token ids,
// block size, lora id nil, medium nil], ["BlockRemoved", [hash], medium nil],
// ["AllBlocksCleared"]. PUB drops messages past its high-water mark by design; a subscriber
// that sees a gap in the sequence asks the replay socket (ZeroMQ ROUTER) for the batches from
// a sequence number on: one reply [sequence, payload] per batch still buffered, then
// [-1, empty] to end. Each model of the server publishes on a topic of its own, with its own
// sequence numbers and replay buffer; a replay request names its topic in a frame before the
// sequence number, or gets the default model's (vLLM's request, which has one model).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/kv_events.h"
#include "common/status.h"
#include "server/grpc/lora_table.h"

namespace tokenmill::server {

// One model's events.
struct KvEventTopic {
  std::string name;  // llm-d reads "kv@<pod>@<model>"
  // The model's LoRA adapters' names by id (null: none): stored blocks report theirs.
  std::shared_ptr<const LoraTable> loras;
};

struct KvEventPublisherOptions {
  // PUB: bound when a wildcard (tcp://*:5557, tcp://127.0.0.1:*), ipc or inproc, else
  // connected to (a router's bound SUB socket), as vLLM does.
  std::string endpoint;
  std::string replay_endpoint;  // ROUTER, e.g. tcp://*:5558; empty: no replay
  // The interface a wildcard host (tcp://*:PORT) binds: the events are prompt data (token
  // ids), so loopback unless the operator names another ("0.0.0.0": every interface).
  std::string wildcard_host = "127.0.0.1";
  int block_size = 16;          // the tokens of each stored block
  int buffer_batches = 10000;   // batches kept for replay, per topic
  std::vector<KvEventTopic> topics;  // one per model, the default model's first
};

class KvEventPublisher {
 public:
  // Opens the sockets (an error names the endpoint that cannot be opened) and starts the
  // publishing thread; batches queued before Start(topic) wait for it.
  static StatusOr<std::unique_ptr<KvEventPublisher>> Create(const KvEventPublisherOptions& options);
  // Publishes what is queued, then closes the sockets and joins the thread.
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // The endpoints as opened (a wildcard port such as tcp://127.0.0.1:* resolved); the replay
  // one empty without replay.
  const std::string& endpoint() const { return bound_endpoint_; }
  const std::string& replay_endpoint() const { return bound_replay_endpoint_; }
  const std::vector<KvEventTopic>& topics() const { return options_.topics; }

  // Queues one step's events of the model options.topics[topic]; any thread (the engine's),
  // never waits on the network.
  void Publish(size_t topic, std::vector<KvCacheEvent> events);

 private:
  struct Sockets;
  KvEventPublisher(const KvEventPublisherOptions& options, std::unique_ptr<Sockets> sockets);
  // A topic's sequence numbers and the batches kept for its replays.
  struct Stream {
    uint64_t next_sequence = 0;
    std::deque<std::pair<uint64_t, std::string>> replay_buffer;
  };

  void Loop();
  void SendBatch(size_t topic, const std::vector<KvCacheEvent>& events);
  void ServeReplay();

  const KvEventPublisherOptions options_;
  std::unique_ptr<Sockets> sockets_;  // the publishing thread's alone
  std::string bound_endpoint_;
  std::string bound_replay_endpoint_;
  std::mutex mutex_;
  bool stopping_ = false;                                           // guarded by mutex_
  std::vector<std::pair<size_t, std::vector<KvCacheEvent>>> queue_;  // guarded by mutex_
  std::vector<Stream> streams_;  // one per topic, the publishing thread's
  std::thread thread_;
};

}  // namespace tokenmill::server
