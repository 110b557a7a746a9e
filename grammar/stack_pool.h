// The pushdown automaton's stacks, shared and hash-consed: a stack is a node id whose node
// holds the top position and the id of the stack below it, so equal stacks are one id, a set
// of stacks is a small vector of ids, and undoing a token is dropping a vector.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tokenmill::grammar {

// Below the root rule: popping to it means the whole grammar matched.
inline constexpr int32_t kBottomOfStack = -1;
// Below the rule a precomputation starts in: popping to it leaves what the precomputation
// can know (the caller's stack decides).
inline constexpr int32_t kUnknownCaller = -2;

// StackNode::count of a node that is not a repeat's frame.
inline constexpr int32_t kNotAFrame = -1;
// The frame a precomputation starts a repeat's unit in: any number of iterations done, all
// of them allowed to continue, and leaving the repeat leaves what the precomputation knows.
inline constexpr int32_t kAnyCount = -2;

struct StackNode {
  int32_t pos;     // a grammar position (an element index); the top's is a byte element
  int32_t parent;  // the stack below, or kBottomOfStack / kUnknownCaller
  // A kRepeat frame (pos is the kRepeat element): the iterations done before the current one;
  // otherwise kNotAFrame.
  int32_t count = kNotAFrame;

  bool is_frame() const { return count != kNotAFrame; }
};

// A node's identity, or a memo's key.
struct NodeKey {
  int32_t pos, parent, count;
  bool operator==(const NodeKey&) const = default;
};

// Where the automaton may be: the stacks whose top is a byte element to match next, whether
// the grammar may end here, and (precomputation only) whether a path left the starting rule.
struct StateSet {
  std::vector<int32_t> stacks;
  bool accepting = false;
  bool left_scope = false;

  bool empty() const { return stacks.empty() && !accepting; }
};

// Open addressing from a node's (pos, parent, count) to its id.
class NodeIdMap {
 public:
  NodeIdMap();
  // The id for key, or -1.
  int32_t Find(const NodeKey& key) const;
  void Insert(const NodeKey& key, int32_t id);
  void Clear();
  size_t size() const { return size_; }

 private:
  void Grow();

  std::vector<NodeKey> keys_;
  std::vector<int32_t> ids_;
  std::vector<uint32_t> used_;  // occupied slots, so Clear costs what was inserted
  size_t size_ = 0;
};

class StackPool {
 public:
  // The node (pos, parent, count), made on first use.
  int32_t Intern(int32_t pos, int32_t parent, int32_t count = kNotAFrame);
  const StackNode& node(int32_t id) const { return nodes_[id]; }
  size_t size() const { return nodes_.size(); }

  // Nodes made between BeginScratch and EndScratch (a mask's trial steps) are dropped at
  // EndScratch; the nodes before stay.
  void BeginScratch();
  void EndScratch();

 private:
  std::vector<StackNode> nodes_;
  NodeIdMap kept_;
  NodeIdMap scratch_;
  size_t scratch_begin_ = 0;
  bool in_scratch_ = false;
};

}  // namespace tokenmill::grammar
