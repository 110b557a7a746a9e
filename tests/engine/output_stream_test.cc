// OutputStream: a sink on one side, a reader on the other, a hook after each push, and a
// queue that outlives the stream while a sink still holds it.
#include "engine/output_stream.h"

#include <gtest/gtest.h>

#include <thread>

namespace tokenmill {
namespace {

GenerateOutput Event(RequestId id, bool finished) {
  GenerateOutput out;
  out.id = id;
  out.finished = finished;
  return out;
}

TEST(OutputStreamTest, DeliversInOrderAndRunsTheHookAfterEachPush) {
  int pushes = 0;
  OutputStream stream([&pushes] { ++pushes; });
  OutputSink sink = stream.Sink();
  EXPECT_FALSE(stream.TryNext().has_value());
  sink(Event(1, false));
  sink(Event(2, true));
  EXPECT_EQ(pushes, 2);
  EXPECT_EQ(stream.Next().id, 1u);
  EXPECT_EQ(stream.TryNext()->id, 2u);
  EXPECT_FALSE(stream.NextFor(std::chrono::milliseconds(1)).has_value());
}

TEST(OutputStreamTest, ReaderOnAnotherThreadWaitsForEvents) {
  OutputStream stream;
  OutputSink sink = stream.Sink();
  std::thread writer([&sink] {
    for (RequestId i = 0; i < 100; ++i) sink(Event(i, i == 99));
  });
  for (RequestId i = 0; i < 100; ++i) EXPECT_EQ(stream.Next().id, i);
  writer.join();
}

TEST(OutputStreamTest, SinkOutlivingTheStreamIsSafe) {
  OutputSink sink;
  {
    OutputStream stream;
    sink = stream.Sink();
  }
  sink(Event(1, true));  // goes to the queue the sink still holds
}

}  // namespace
}  // namespace tokenmill
