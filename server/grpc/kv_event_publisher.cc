#include "server/grpc/kv_event_publisher.h"

#include <msgpack.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include <array>
#include <chrono>
#include <optional>
#include <string_view>
#include <utility>

#include "common/check.h"

namespace tokenmill::server {
namespace {

// How long the thread sleeps in zmq::poll between looks at its queue: the latency of an event.
constexpr std::chrono::milliseconds kPollInterval(10);
// Messages a slow subscriber may fall behind before PUB drops (vLLM's default too).
constexpr int kHighWaterMark = 100000;
// How long closing waits for queued messages to leave.
constexpr int kLingerMs = 1000;

std::array<uint8_t, 8> BigEndian(int64_t value) {
  std::array<uint8_t, 8> bytes;
  for (int i = 7; i >= 0; --i, value >>= 8) bytes[i] = static_cast<uint8_t>(value & 0xff);
  return bytes;
}

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The pool's events carry no medium, as before tiers (a router reads nil as the device's).
void PackMedium(msgpack::packer<msgpack::sbuffer>& pack, const std::string& medium) {
  if (medium.empty()) {
    pack.pack_nil();
  } else {
    pack.pack(medium);
  }
}

std::string EncodeBatch(const std::vector<KvCacheEvent>& events, int block_size,
                        const std::vector<std::string>& lora_names) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pack(buffer);
  pack.pack_array(2);
  pack.pack_double(UnixSeconds());
  pack.pack_array(static_cast<uint32_t>(events.size()));
  for (const KvCacheEvent& event : events) {
    switch (event.kind) {
      case KvCacheEvent::Kind::kBlockStored:
        pack.pack_array(8);
        pack.pack(std::string_view("BlockStored"));
        pack.pack_array(1);
        pack.pack_uint64(event.hash);
        if (event.parent_hash.has_value()) {
          pack.pack_uint64(*event.parent_hash);
        } else {
          pack.pack_nil();
        }
        pack.pack(event.tokens);
        pack.pack_int(block_size);
        // lora_id (deprecated in vLLM, kept for its older consumers), then lora_name last.
        if (event.lora > 0) {
          pack.pack_int(event.lora);
        } else {
          pack.pack_nil();
        }
        PackMedium(pack, event.medium);
        if (event.lora > 0 && static_cast<size_t>(event.lora) <= lora_names.size()) {
          pack.pack(lora_names[static_cast<size_t>(event.lora) - 1]);
        } else {
          pack.pack_nil();
        }
        break;
      case KvCacheEvent::Kind::kBlockRemoved:
        pack.pack_array(3);
        pack.pack(std::string_view("BlockRemoved"));
        pack.pack_array(1);
        pack.pack_uint64(event.hash);
        PackMedium(pack, event.medium);
        break;
      case KvCacheEvent::Kind::kAllBlocksCleared:
        pack.pack_array(1);
        pack.pack(std::string_view("AllBlocksCleared"));
        break;
    }
  }
  return std::string(buffer.data(), buffer.size());
}

// vLLM's rule: a wildcard address (or ipc/inproc) is bound, any other is connected to, so a
// router that binds its SUB socket (llm-d's precise prefix scorer) collects every pod's
// events at one address.
bool BindsAsPublisher(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://");
}

// "tcp://*:5557" -> "tcp://<host>:5557": ZeroMQ's "*" is every interface, and the events
// carry prompts. Any other endpoint names its interface already and is kept.
std::string BindAddress(const std::string& endpoint, const std::string& wildcard_host) {
  constexpr std::string_view kWildcard = "tcp://*:";
  if (!endpoint.starts_with(kWildcard)) return endpoint;
  const bool ipv6 = wildcard_host.find(':') != std::string::npos;
  return "tcp://" + (ipv6 ? "[" + wildcard_host + "]" : wildcard_host) + ":" +
         endpoint.substr(kWildcard.size());
}

}  // namespace

struct KvEventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  zmq::socket_t replay{context, zmq::socket_type::router};
  bool has_replay = false;
};

StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Create(
    const KvEventPublisherOptions& options) {
  auto sockets = std::make_unique<Sockets>();
  const auto open = [](zmq::socket_t& socket, const std::string& endpoint, bool bind,
                       const char* flag) -> Status {
    socket.set(zmq::sockopt::linger, kLingerMs);
    try {
      if (bind) {
        socket.bind(endpoint);
      } else {
        socket.connect(endpoint);
      }
    } catch (const zmq::error_t& e) {
      return InvalidArgumentError(std::string(flag) + " '" + endpoint + "' cannot be " +
                                  (bind ? "bound: " : "connected to: ") + e.what() +
                                  " (a ZeroMQ endpoint such as tcp://*:5557)");
    }
    return OkStatus();
  };
  sockets->pub.set(zmq::sockopt::sndhwm, kHighWaterMark);
  const bool bind = BindsAsPublisher(options.endpoint);
  TM_RETURN_IF_ERROR(open(sockets->pub,
                          bind ? BindAddress(options.endpoint, options.wildcard_host)
                               : options.endpoint,
                          bind, "--kv-events-endpoint"));
  if (!options.replay_endpoint.empty()) {
    TM_RETURN_IF_ERROR(open(sockets->replay,
                            BindAddress(options.replay_endpoint, options.wildcard_host),
                            /*bind=*/true, "--kv-events-replay-endpoint"));
    sockets->has_replay = true;
  }
  return std::unique_ptr<KvEventPublisher>(new KvEventPublisher(options, std::move(sockets)));
}

KvEventPublisher::KvEventPublisher(const KvEventPublisherOptions& options,
                                   std::unique_ptr<Sockets> sockets)
    : options_(options),
      sockets_(std::move(sockets)),
      bound_endpoint_(BindsAsPublisher(options.endpoint)
                          ? sockets_->pub.get(zmq::sockopt::last_endpoint)
                          : options.endpoint),
      bound_replay_endpoint_(sockets_->has_replay
                                 ? sockets_->replay.get(zmq::sockopt::last_endpoint)
                                 : std::string()),
      streams_(options.topics.size()),
      thread_([this] { Loop(); }) {}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  thread_.join();
}

void KvEventPublisher::Publish(size_t topic, std::vector<KvCacheEvent> events) {
  TM_CHECK(topic < options_.topics.size()) << "no KV event topic " << topic;
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.emplace_back(topic, std::move(events));
}

void KvEventPublisher::Loop() {
  while (true) {
    if (sockets_->has_replay) {
      zmq::pollitem_t item{sockets_->replay.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, kPollInterval);
      if ((item.revents & ZMQ_POLLIN) != 0) ServeReplay();
    } else {
      std::this_thread::sleep_for(kPollInterval);
    }
    std::vector<std::pair<size_t, std::vector<KvCacheEvent>>> batches;
    bool stopping = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::swap(batches, queue_);
      stopping = stopping_;
    }
    for (const auto& [topic, batch] : batches) SendBatch(topic, batch);
    if (stopping) break;
  }
}

void KvEventPublisher::SendBatch(size_t topic, const std::vector<KvCacheEvent>& events) {
  const KvEventTopic& to = options_.topics[topic];
  const std::vector<std::string> lora_names =
      to.loras != nullptr ? to.loras->NamesById() : std::vector<std::string>{};
  std::string payload = EncodeBatch(events, options_.block_size, lora_names);
  Stream& stream = streams_[topic];
  const uint64_t sequence = stream.next_sequence++;
  const std::array<uint8_t, 8> sequence_bytes = BigEndian(static_cast<int64_t>(sequence));
  // PUB never blocks: past the high-water mark a message is dropped (replay recovers it).
  sockets_->pub.send(zmq::buffer(to.name), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  sockets_->pub.send(zmq::buffer(sequence_bytes),
                     zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  sockets_->pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  stream.replay_buffer.emplace_back(sequence, std::move(payload));
  while (static_cast<int>(stream.replay_buffer.size()) > options_.buffer_batches) {
    stream.replay_buffer.pop_front();
  }
}

void KvEventPublisher::ServeReplay() {
  // From a REQ (or DEALER) client: [identity, empty, start sequence as 8 bytes big-endian],
  // or with the topic in a frame before the sequence; without one, the default model's.
  std::vector<zmq::message_t> frames;
  while (true) {
    zmq::message_t frame;
    if (!sockets_->replay.recv(frame, zmq::recv_flags::dontwait)) break;
    const bool more = frame.more();
    frames.push_back(std::move(frame));
    if (!more) break;
  }
  if (frames.size() < 2 || frames.back().size() != 8) {
    spdlog::debug("KV events replay: ignored a malformed request of {} frames", frames.size());
    return;
  }
  int64_t start = 0;
  for (const uint8_t byte : std::span(frames.back().data<uint8_t>(), 8)) {
    start = (start << 8) | byte;
  }
  const zmq::message_t& identity = frames.front();
  std::optional<size_t> topic = 0;
  if (frames.size() >= 3 && frames[frames.size() - 2].size() > 0) {
    const std::string_view name = frames[frames.size() - 2].to_string_view();
    topic.reset();
    for (size_t i = 0; i < options_.topics.size(); ++i) {
      if (options_.topics[i].name == name) topic = i;
    }
  }
  const auto reply = [&](const std::array<uint8_t, 8>& sequence, const std::string& payload) {
    sockets_->replay.send(zmq::buffer(identity.data(), identity.size()),
                          zmq::send_flags::sndmore);
    sockets_->replay.send(zmq::message_t(), zmq::send_flags::sndmore);
    sockets_->replay.send(zmq::buffer(sequence), zmq::send_flags::sndmore);
    sockets_->replay.send(zmq::buffer(payload), zmq::send_flags::none);
  };
  if (topic.has_value()) {  // an unknown topic has nothing to replay
    for (const auto& [sequence, payload] : streams_[*topic].replay_buffer) {
      if (static_cast<int64_t>(sequence) >= start) {
        reply(BigEndian(static_cast<int64_t>(sequence)), payload);
      }
    }
  }
  reply(BigEndian(-1), std::string());
}

}  // namespace tokenmill::server
