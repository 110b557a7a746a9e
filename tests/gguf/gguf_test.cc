#include "gguf/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "common/byte_size.h"
#include "tests/gguf/gguf_builder.h"
#include "tests/test_paths.h"

namespace tokenmill {
namespace {

using ::testing::HasSubstr;
using testing::GgufBuilder;

std::vector<uint8_t> F32Data(int n) {
  std::vector<uint8_t> data(n * 4);
  for (int i = 0; i < n; ++i) {
    const float v = static_cast<float>(i);
    std::memcpy(data.data() + 4 * i, &v, 4);
  }
  return data;
}

GgufBuilder ValidBuilder() {
  GgufBuilder b;
  b.KeyString("general.architecture", "llama")
      .KeyU32("llama.block_count", 2)
      .KeyF32("llama.rope.freq_base", 10000.0f)
      .KeyBool("tokenizer.ggml.add_bos_token", true)
      .KeyI32("tokenizer.ggml.padding_token_id", -1)
      .KeyStrings("tokenizer.ggml.tokens", {"<unk>", "a", "b"})
      .Tensor("a", 0, {4, 2}, F32Data(8))
      .Tensor("b", 0, {3}, F32Data(3));
  return b;
}

std::string ParseError(const std::vector<uint8_t>& bytes) {
  const StatusOr<GgufFile> file = GgufFile::Parse(bytes);
  return file.ok() ? "parsed" : file.status().message();
}

TEST(GgufTest, ParsesMetadataAndTensors) {
  const std::vector<uint8_t> bytes = ValidBuilder().Build();
  const StatusOr<GgufFile> file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(*file->GetString("general.architecture"), "llama");
  EXPECT_EQ(*file->GetU32("llama.block_count"), 2u);
  EXPECT_EQ(*file->GetU64("llama.block_count"), 2u);
  EXPECT_EQ(*file->GetF32("llama.rope.freq_base"), 10000.0f);
  EXPECT_TRUE(*file->GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(*file->GetI32("tokenizer.ggml.padding_token_id"), -1);
  EXPECT_THAT(*file->GetStringArray("tokenizer.ggml.tokens"), ::testing::ElementsAre("<unk>", "a", "b"));

  ASSERT_EQ(file->tensors().size(), 2u);
  const GgufTensor* a = file->FindTensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(a->num_elements, 8);
  EXPECT_EQ(a->num_bytes, 32);
  float v7;
  std::memcpy(&v7, a->data + 28, 4);
  EXPECT_EQ(v7, 7.0f);
  EXPECT_EQ(file->FindTensor("b")->offset, 32u);
  EXPECT_EQ(file->FindTensor("missing"), nullptr);
}

TEST(GgufTest, AccessorsNameTheKeyWhenMissingOrOfAnotherType) {
  const std::vector<uint8_t> bytes = ValidBuilder().Build();
  const StatusOr<GgufFile> file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok());
  const Status missing = file->GetU32("llama.context_length").status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("'llama.context_length'"));
  EXPECT_THAT(file->GetU32("general.architecture").status().message(),
              HasSubstr("'general.architecture' is a string, expected uint32"));
  EXPECT_THAT(file->GetU32("tokenizer.ggml.padding_token_id").status().message(),
              HasSubstr("does not fit in uint32"));
  EXPECT_THAT(file->GetString("tokenizer.ggml.tokens").status().message(),
              HasSubstr("is a array of string, expected string"));
  EXPECT_THAT(file->GetF32Array("tokenizer.ggml.tokens").status().message(),
              HasSubstr("expected array of float"));
}

TEST(GgufTest, EveryValueTypeIncludingNestedArrays) {
  GgufBuilder b;
  b.KeyRaw("u8", 0, {200}).KeyRaw("i8", 1, {0xff}).KeyRaw("u16", 2, GgufBuilder::Bytes<uint16_t>(60000))
      .KeyRaw("i16", 3, GgufBuilder::Bytes<int16_t>(-300)).KeyRaw("u64", 10, GgufBuilder::Bytes<uint64_t>(1ull << 40))
      .KeyRaw("i64", 11, GgufBuilder::Bytes<int64_t>(-5)).KeyRaw("f64", 12, GgufBuilder::Bytes<double>(0.5));
  std::vector<uint8_t> nested;  // array of 2 arrays of int32
  GgufBuilder::Put<uint32_t>(nested, 9);
  GgufBuilder::Put<uint64_t>(nested, 2);
  for (int k = 0; k < 2; ++k) {
    GgufBuilder::Put<uint32_t>(nested, 5);
    GgufBuilder::Put<uint64_t>(nested, 1);
    GgufBuilder::Put<int32_t>(nested, k + 7);
  }
  b.KeyRaw("nested", 9, nested);
  const std::vector<uint8_t> bytes = b.Build();
  const StatusOr<GgufFile> file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(*file->GetU32("u8"), 200u);
  EXPECT_EQ(*file->GetI32("i8"), -1);
  EXPECT_EQ(*file->GetU32("u16"), 60000u);
  EXPECT_EQ(*file->GetI32("i16"), -300);
  EXPECT_EQ(*file->GetU64("u64"), 1ull << 40);
  EXPECT_FALSE(file->GetU32("u64").ok());
  EXPECT_EQ(*file->GetI32("i64"), -5);
  EXPECT_EQ(*file->GetF32("f64"), 0.5f);
  EXPECT_EQ(file->Find("nested")->ToString(), "[[7], [8]]");
}

TEST(GgufTest, MalformedFilesFailWithAClearError) {
  const std::vector<uint8_t> good = ValidBuilder().Build();
  EXPECT_EQ(ParseError(good), "parsed");

  EXPECT_THAT(ParseError({}), HasSubstr("truncated"));
  std::vector<uint8_t> bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_THAT(ParseError(bad_magic), HasSubstr("not a GGUF file"));
  EXPECT_THAT(ParseError(GgufBuilder(1).Build()), HasSubstr("version 1 is not supported"));
  EXPECT_THAT(ParseError(GgufBuilder(7).Build()), HasSubstr("unknown GGUF version 7"));
  EXPECT_THAT(ParseError(GgufBuilder(0x03000000).Build()), HasSubstr("big-endian"));
  EXPECT_EQ(ParseError(GgufBuilder(2).Build()), "parsed");

  // Every proper prefix of a valid file is truncated somewhere.
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> prefix(good.begin(), good.begin() + n);
    EXPECT_NE(ParseError(prefix), "parsed") << "prefix of " << n << " bytes";
  }
}

TEST(GgufTest, AbsurdCountsAreRejectedBeforeAllocating) {
  std::vector<uint8_t> bytes = ValidBuilder().Build();
  std::vector<uint8_t> huge_kv = bytes;
  const uint64_t huge = 1ull << 60;
  std::memcpy(huge_kv.data() + 16, &huge, 8);
  EXPECT_THAT(ParseError(huge_kv), HasSubstr("metadata count"));
  std::vector<uint8_t> huge_tensors = bytes;
  std::memcpy(huge_tensors.data() + 8, &huge, 8);
  EXPECT_THAT(ParseError(huge_tensors), HasSubstr("tensor count"));

  std::vector<uint8_t> long_string;  // a string claiming 2^60 bytes
  GgufBuilder::Put<uint64_t>(long_string, huge);
  EXPECT_THAT(ParseError(GgufBuilder().KeyRaw("k", 8, long_string).Build()),
              HasSubstr("claims 1152921504606846976 bytes"));
  std::vector<uint8_t> long_array;
  GgufBuilder::Put<uint32_t>(long_array, 6);
  GgufBuilder::Put<uint64_t>(long_array, huge);
  EXPECT_THAT(ParseError(GgufBuilder().KeyRaw("k", 9, long_array).Build()),
              HasSubstr("array items, more than the file holds"));
}

TEST(GgufTest, BadValuesAndTensorInfos) {
  EXPECT_THAT(ParseError(GgufBuilder().KeyRaw("k", 13, {}).Build()), HasSubstr("unknown value type 13"));
  EXPECT_THAT(ParseError(GgufBuilder().KeyRaw("k", 7, {2}).Build()), HasSubstr("bool of value 2"));
  EXPECT_THAT(ParseError(GgufBuilder().KeyU32("k", 1).KeyU32("k", 2).Build()), HasSubstr("'k' appears twice"));
  EXPECT_THAT(ParseError(GgufBuilder().KeyU32("general.alignment", 24).Build()), HasSubstr("not a power of two"));
  EXPECT_THAT(ParseError(GgufBuilder().Tensor("t", 99, {32}, {}).Build()), HasSubstr("unknown tensor type 99"));
  EXPECT_THAT(ParseError(GgufBuilder().Tensor("t", 2, {33}, std::vector<uint8_t>(40)).Build()),
              HasSubstr("not a multiple of the q4_0 block size 32"));
  // SmolLM2's 576-wide rows in a 256-element K-quant block; a block-32 type of 48.
  EXPECT_THAT(
      ParseError(GgufBuilder().Tensor("w", 12, {576, 2}, std::vector<uint8_t>(640)).Build()),
      HasSubstr("tensor 'w' has rows of 576 elements, not a multiple of the q4_k block size 256"));
  EXPECT_THAT(
      ParseError(GgufBuilder().Tensor("w", 7, {48}, std::vector<uint8_t>(48)).Build()),
      HasSubstr("tensor 'w' has rows of 48 elements, not a multiple of the q5_1 block size 32"));
  EXPECT_THAT(ParseError(GgufBuilder().Tensor("t", 0, {1, 1, 1, 1, 1}, F32Data(1)).Build()),
              HasSubstr("5 dimensions"));
  EXPECT_THAT(ParseError(GgufBuilder().Tensor("t", 0, {4, 0}, {}).Build()), HasSubstr("invalid shape"));
  EXPECT_THAT(ParseError(GgufBuilder().Tensor("t", 0, {1ull << 32, 1ull << 32}, {}).Build()),
              HasSubstr("invalid shape"));
  EXPECT_THAT(ParseError(GgufBuilder().Tensor("t", 0, {4}, F32Data(4)).Tensor("t", 0, {4}, F32Data(4)).Build()),
              HasSubstr("'t' appears twice"));
}

TEST(GgufTest, TensorDataOutOfBoundsMisalignedOrOverlapping) {
  // Declared 64 elements but only 8 bytes of data follow.
  EXPECT_THAT(ParseError(GgufBuilder().Tensor("t", 0, {64}, F32Data(2)).Build()),
              HasSubstr("'t' lies beyond the end of the file"));
  // Two IQ4_NL blocks (2 × 18 bytes) declared, one present; Q5_0 tensors sharing bytes.
  EXPECT_THAT(ParseError(GgufBuilder().Tensor("t", 20, {64}, std::vector<uint8_t>(18)).Build()),
              HasSubstr("'t' lies beyond the end of the file (offset 0, 36 bytes"));
  EXPECT_THAT(ParseError(GgufBuilder()
                             .Tensor("a", 6, {64}, std::vector<uint8_t>(44), 0)
                             .Tensor("b", 6, {32}, std::vector<uint8_t>(22), 32)
                             .Build()),
              HasSubstr("'a' and 'b' overlap"));
  EXPECT_THAT(ParseError(GgufBuilder().Tensor("t", 0, {4}, F32Data(4), 8).Build()),
              HasSubstr("not a multiple of the alignment 32"));
  EXPECT_THAT(ParseError(GgufBuilder().Tensor("a", 0, {16}, F32Data(16), 0).Tensor("b", 0, {8}, F32Data(8), 32).Build()),
              HasSubstr("'a' and 'b' overlap"));
}

TEST(GgufTest, TypeMixCountsTensorsAndBytesPerTypeMostBytesFirst) {
  const std::vector<uint8_t> bytes = GgufBuilder()
                                         .Tensor("norm", 0, {4}, F32Data(4))
                                         .Tensor("a", 3, {64}, std::vector<uint8_t>(40))
                                         .Tensor("b", 3, {32}, std::vector<uint8_t>(20))
                                         .Build();
  const StatusOr<GgufFile> file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const std::vector<GgufTypeTotal> mix = TypeMix(*file);
  ASSERT_EQ(mix.size(), 2u);
  EXPECT_EQ(mix[0].type, "q4_1");
  EXPECT_EQ(mix[0].tensors, 2);
  EXPECT_EQ(mix[0].bytes, 60);
  EXPECT_EQ(mix[1].type, "f32");
  EXPECT_EQ(mix[1].tensors, 1);
  EXPECT_EQ(mix[1].bytes, 16);
  EXPECT_EQ(FormatTypeMix(mix),
            "q4_1: 2 tensors, " + FormatBytes(60) + "; f32: 1 tensor, " + FormatBytes(16));
}

TEST(GgufTest, OpenReportsMissingFilesByPath) {
  const StatusOr<GgufFile> file = GgufFile::Open("/nonexistent/model.gguf");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr("/nonexistent/model.gguf"));
}

// The two real models: every tensor in bounds, and the metadata the model code needs.
TEST(GgufTest, OpensTheDefaultModel) {
  const StatusOr<GgufFile> file =
      GgufFile::Open(TestModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf");
  ASSERT_TRUE(file.ok()) << file.status().ToString() << " (run scripts/setup)";
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(*file->GetString("general.architecture"), "llama");
  EXPECT_EQ(*file->GetU32("llama.block_count"), 30u);
  EXPECT_EQ(*file->GetU32("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(file->GetStringArray("tokenizer.ggml.tokens")->size(), 49152u);
  EXPECT_EQ(file->tensors().size(), 272u);
  const GgufTensor* embd = file->FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->shape, (std::vector<int64_t>{576, 49152}));
}

// A model loader drops the pages of weights it copied (GgufFile::ReleasePages): what is read
// after is still the file's bytes, those of the released tensor and of its neighbours.
TEST(GgufTest, ReleasedPagesReadBackAsTheFile) {
  const std::string path = TestModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  const StatusOr<GgufFile> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString() << " (run scripts/setup)";
  const std::vector<uint8_t> before(file->bytes().begin(), file->bytes().end());
  for (const GgufTensor& t : file->tensors()) {
    file->ReleasePages(t.data, static_cast<size_t>(t.num_bytes));
  }
  EXPECT_TRUE(std::equal(before.begin(), before.end(), file->bytes().begin()));
}

TEST(GgufTest, OpensTheTinyStoriesModel) {
  const StatusOr<GgufFile> file = GgufFile::Open(TestModelsDir() + "/stories260K.gguf");
  ASSERT_TRUE(file.ok()) << file.status().ToString() << " (run scripts/setup)";
  EXPECT_EQ(*file->GetU32("llama.embedding_length"), 64u);
  EXPECT_EQ(*file->GetString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(file->GetF32Array("tokenizer.ggml.scores")->size(), 512u);
  EXPECT_EQ(file->tensors().size(), 48u);
}

}  // namespace
}  // namespace tokenmill
