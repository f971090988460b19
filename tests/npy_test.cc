// .npy reading and writing: round trips, NumPy's exact bytes, and a clear message for every way a
// file can be wrong.
#include "cli/npy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "support/tensor_values.h"
#include "support/test_names.h"

namespace gradsync::cli {
namespace {

using namespace std::string_literals;

Status read_bytes(const std::string& bytes, NpyArray& array) {
  std::istringstream in(bytes);
  return read_npy(in, array);
}

std::string written(const NpyArray& array) {
  std::ostringstream out;
  const Status status = write_npy(out, array);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return out.str();
}

// A file with `header` (spaces and a newline added, as any writer would) after the preamble of
// format version `major`.0, then `data`.
std::string npy_file(std::string header, std::string_view data = {}, int major = 1) {
  header += "   \n";
  std::string file = "\x93NUMPY"s + static_cast<char>(major) + '\0';
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  for (std::size_t i = 0; i < length_bytes; ++i) {
    file += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }
  return file + header + std::string(data);
}

NpyArray array_of(DataType type, std::vector<std::uint64_t> shape) {
  NpyArray array;
  array.type = type;
  array.data =
      testing::pattern(0, static_cast<int>(type), element_count(shape) * element_size(type));
  array.shape = std::move(shape);
  return array;
}

struct RoundTripCase {
  DataType type;
  std::vector<std::uint64_t> shape;
};

class NpyRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(NpyRoundTrip, ReadsBackWhatItWrote) {
  const NpyArray original = array_of(GetParam().type, GetParam().shape);
  const std::string bytes = written(original);
  const std::size_t data_offset = bytes.size() - original.data.size();
  EXPECT_EQ(bytes.substr(0, 8), "\x93NUMPY\x01\x00"s);
  EXPECT_EQ(data_offset % 64, 0u);
  EXPECT_EQ(bytes[data_offset - 1], '\n');

  NpyArray read;
  const Status status = read_bytes(bytes, read);
  ASSERT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(read.type, original.type);
  EXPECT_EQ(read.shape, original.shape);
  EXPECT_EQ(read.data, original.data);
}

std::vector<RoundTripCase> round_trip_cases() {
  std::vector<RoundTripCase> cases;
  for (DataType type : kAllDataTypes) {
    if (type == DataType::bf16) continue;
    for (const std::vector<std::uint64_t>& shape :
         std::vector<std::vector<std::uint64_t>>{{0}, {}, {1}, {1000}, {7, 13}, {3, 0, 5}}) {
      cases.push_back({type, shape});
    }
  }
  return cases;
}

// The dtype, the number of dimensions and the shape: "f32_2d_7x13", "i64_0d".
std::string round_trip_name(const ::testing::TestParamInfo<RoundTripCase>& param_info) {
  const RoundTripCase& round_trip = param_info.param;
  std::string result =
      std::string(name(round_trip.type)) + "_" + std::to_string(round_trip.shape.size()) + "d";
  for (std::size_t i = 0; i < round_trip.shape.size(); ++i) {
    result += (i == 0 ? "_" : "x") + std::to_string(round_trip.shape[i]);
  }
  return result;
}

INSTANTIATE_TEST_SUITE_P(EveryDtypeAndShape, NpyRoundTrip, ::testing::ValuesIn(round_trip_cases()),
                         round_trip_name);

// np.save("a.npy", np.arange(3, dtype="<f4")), byte for byte.
std::string numpy_arange3_f4() {
  std::string file =
      "\x93NUMPY\x01\x00v\x00"s + "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  file.resize(127, ' ');
  file += '\n';
  return file + "\0\0\0\0\0\0\x80\x3f\0\0\0\x40"s;
}

TEST(Npy, ReadsAFileWrittenByNumpy) {
  NpyArray array;
  const Status status = read_bytes(numpy_arange3_f4(), array);
  ASSERT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(array.type, DataType::f32);
  EXPECT_EQ(array.shape, std::vector<std::uint64_t>{3});
  ASSERT_EQ(array.data.size(), 12u);
  float values[3];
  std::memcpy(values, array.data.data(), sizeof(values));
  EXPECT_EQ(values[0], 0.0f);
  EXPECT_EQ(values[1], 1.0f);
  EXPECT_EQ(values[2], 2.0f);
}

TEST(Npy, WritesTheBytesNumpyWrites) {
  NpyArray array;
  array.type = DataType::f32;
  array.shape = {3};
  const float values[3] = {0.0f, 1.0f, 2.0f};
  array.data.resize(sizeof(values));
  std::memcpy(array.data.data(), values, sizeof(values));
  EXPECT_EQ(written(array), numpy_arange3_f4());
}

TEST(Npy, WritesU8AsNumpyNamesIt) {
  const std::string bytes = written(array_of(DataType::u8, {2}));
  EXPECT_NE(bytes.find("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }"),
            std::string::npos)
      << bytes;
}

TEST(Npy, WritesA0dArrayWithAnEmptyShape) {
  const std::string bytes = written(array_of(DataType::i64, {}));
  EXPECT_NE(bytes.find("'shape': (), }"), std::string::npos) << bytes;
  EXPECT_EQ(bytes.size(), 128u + 8u);
}

struct AcceptedFile {
  std::string description;
  std::string bytes;
  DataType type;
  std::vector<std::uint64_t> shape;
};

class NpyAccepts : public ::testing::TestWithParam<AcceptedFile> {};

TEST_P(NpyAccepts, AnyHeaderNumpyCouldHaveWritten) {
  NpyArray array;
  const Status status = read_bytes(GetParam().bytes, array);
  ASSERT_TRUE(status.ok()) << GetParam().description << ": " << status.to_string();
  EXPECT_EQ(array.type, GetParam().type);
  EXPECT_EQ(array.shape, GetParam().shape);
  EXPECT_EQ(array.data.size(), element_count(array.shape) * element_size(array.type));
}

INSTANTIATE_TEST_SUITE_P(
    Headers, NpyAccepts,
    ::testing::Values(
        AcceptedFile{"version 2.0",
                     npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
                              std::string(8, '\1'), 2),
                     DataType::i32,
                     {2}},
        AcceptedFile{"version 3.0",
                     npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }",
                              std::string(8, '\1'), 3),
                     DataType::f64,
                     {1}},
        AcceptedFile{"keys in another order, double quotes, no trailing comma",
                     npy_file("{\"shape\": (2, 1), \"fortran_order\": False, \"descr\": \"<f2\"}",
                              std::string(4, '\1')),
                     DataType::f16,
                     {2, 1}},
        AcceptedFile{"Python 2 long literals",
                     npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (1L, 2L), }",
                              std::string(16, '\1')),
                     DataType::i64,
                     {1, 2}},
        AcceptedFile{"'<c8'",
                     npy_file("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }",
                              std::string(8, '\0')),
                     DataType::c64,
                     {1}},
        AcceptedFile{"'<u1'",
                     npy_file("{'descr': '<u1', 'fortran_order': False, 'shape': (3,), }", "abc"),
                     DataType::u8,
                     {3}},
        AcceptedFile{"a 0-d array",
                     npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
                              std::string(4, '\1')),
                     DataType::f32,
                     {}},
        AcceptedFile{"a zero dimension beside huge ones",
                     npy_file("{'descr': '<f4', 'fortran_order': False, "
                              "'shape': (4294967296, 4294967296, 0), }"),
                     DataType::f32,
                     {4294967296, 4294967296, 0}}),
    [](const ::testing::TestParamInfo<AcceptedFile>& param_info) {
      return testing::identifier(param_info.param.description);
    });

struct RejectedFile {
  std::string description;
  std::string bytes;
  std::string message;
};

class NpyRejects : public ::testing::TestWithParam<RejectedFile> {};

TEST_P(NpyRejects, WithAMessageThatSaysWhatIsWrong) {
  NpyArray array;
  const Status status = read_bytes(GetParam().bytes, array);
  EXPECT_EQ(status.code(), ErrorCode::invalid_argument);
  EXPECT_NE(status.message().find(GetParam().message), std::string::npos) << status.message();
}

std::string f4_header(std::string_view shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + std::string(shape) + ", }";
}

// A header claiming 10^15 f4 elements, then data up to 200 bytes: the reader must refuse it from
// the file's size, without allocating 4 PB first.
std::string huge_shape_on_a_small_file() {
  std::string file = npy_file(f4_header("(1000000000000000,)"));
  file.resize(200, '\1');
  return file;
}

INSTANTIATE_TEST_SUITE_P(
    BadFiles, NpyRejects,
    ::testing::Values(
        RejectedFile{"an empty file", "", "not a .npy file: it is empty"},
        RejectedFile{"a wrong magic string", "\x93NUMPZ\x01\x00"s + f4_header("(1,)"),
                     "not a .npy file: it does not start with the magic string \\x93NUMPY"},
        RejectedFile{"a zip file", "PK\x03\x04 a zip file",
                     "not a .npy file: it does not start with the magic string"},
        RejectedFile{"a file shorter than the magic string", "\x93NUM",
                     "truncated .npy header: the file ends after 4 bytes"},
        RejectedFile{"a file that ends inside the preamble", "\x93NUMPY\x01\x00\x40"s,
                     "truncated .npy header: the file ends after 9 bytes, inside the preamble"},
        RejectedFile{"a version 2.0 file that ends inside the preamble",
                     "\x93NUMPY\x02\x00\x40\x00\x00"s,
                     "truncated .npy header: the file ends after 11 bytes"},
        RejectedFile{"format version 4.0", "\x93NUMPY\x04\x00\x10\x00{}"s,
                     "unsupported .npy format version 4.0 (supported: 1.0, 2.0, 3.0)"},
        RejectedFile{"format version 1.1", "\x93NUMPY\x01\x01\x10\x00{}"s,
                     "unsupported .npy format version 1.1"},
        RejectedFile{"a file that ends inside the header",
                     npy_file(f4_header("(3,)")).substr(0, 60),
                     "truncated .npy header: it claims 61 bytes, but the file has only 50 after "
                     "the preamble"},
        RejectedFile{"a version 2.0 header length of 4 GiB", "\x93NUMPY\x02\x00\xff\xff\xff\xff{}"s,
                     "truncated .npy header: it claims 4294967295 bytes, but the file has only 2"},
        RejectedFile{"a header that is a list", npy_file("[1, 2]"),
                     "the .npy header is not a dict: [1, 2]"},
        RejectedFile{"no shape key", npy_file("{'descr': '<f4', 'fortran_order': False}"),
                     "the .npy header has no 'shape' key: {'descr': '<f4', 'fortran_order': "
                     "False}"},
        RejectedFile{"no descr key", npy_file("{'shape': (1,), 'fortran_order': False}"),
                     "the .npy header has no 'descr' key"},
        RejectedFile{"an empty dict", npy_file("{}"), "the .npy header has no 'descr' key"},
        RejectedFile{"an unexpected key",
                     npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), "
                              "'extra': 1}"),
                     "the .npy header has an unexpected key 'extra'"},
        RejectedFile{"a key without a colon", npy_file("{'descr' '<f4'}"),
                     "malformed .npy header: expected ':' at byte 9 of {'descr' '<f4'}"},
        RejectedFile{"a dict that is never closed", npy_file("{'descr': '<f4'"),
                     "malformed .npy header: expected ',' or '}' at byte 19 of {'descr': '<f4'"},
        RejectedFile{"junk after the dict", npy_file(f4_header("(1,)") + " junk"),
                     "malformed .npy header: expected the end of the header after the dict"},
        RejectedFile{"Fortran order",
                     npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }",
                              std::string(4, '\0')),
                     "the array is in Fortran order ('fortran_order': True); only C order is "
                     "supported"},
        RejectedFile{"a fortran_order that is not a bool",
                     npy_file("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }"),
                     "'fortran_order' is not True or False"},
        RejectedFile{"big-endian data",
                     npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }",
                              std::string(4, '\0')),
                     "dtype '>f4' is big-endian; only little-endian data is supported"},
        RejectedFile{"an unsigned 16-bit dtype",
                     npy_file("{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }",
                              std::string(2, '\0')),
                     "unsupported dtype '<u2' (supported: '<f2' '<f4' '<f8' '<i4' '<i8' '|u1' "
                     "'|i1' '<i2' '|b1' '<c8' '<c16')"},
        RejectedFile{"a structured dtype",
                     npy_file("{'descr': [('x', '<f4')], 'fortran_order': False, "
                              "'shape': (1,), }"),
                     "structured dtypes are not supported"},
        RejectedFile{"less data than the shape needs",
                     npy_file(f4_header("(3,)"), std::string(8, '\0')),
                     "truncated .npy data: shape (3,) of '<f4' needs 12 bytes, but the file has "
                     "only 8 after the header"},
        RejectedFile{"more data than the shape needs",
                     npy_file(f4_header("(3,)"), std::string(16, '\0')),
                     "the .npy file is longer than its shape says: shape (3,) of '<f4' needs 12 "
                     "bytes, but the file has 16 after the header"},
        RejectedFile{"a huge shape on a small file", huge_shape_on_a_small_file(),
                     "truncated .npy data: shape (1000000000000000,) of '<f4' needs "
                     "4000000000000000 bytes, but the file has only 114 after the header"},
        RejectedFile{"a shape of more than 2^64 bytes",
                     npy_file(f4_header("(4294967296, 4294967296)")),
                     "needs more than 2^64 bytes, but the file has only 0 after the header"},
        RejectedFile{"a dimension beyond 64 bits", npy_file(f4_header("(18446744073709551616,)")),
                     "'shape' has a dimension that does not fit in 64 bits"},
        RejectedFile{"a negative dimension", npy_file(f4_header("(-1,)")),
                     "'shape' has a negative dimension"},
        RejectedFile{"a shape in parentheses without a comma", npy_file(f4_header("(3)")),
                     "'shape' is not a tuple"},
        RejectedFile{"a shape that is a list", npy_file(f4_header("[3]")),
                     "'shape' is not a tuple"},
        RejectedFile{"two dimensions without a comma between them", npy_file(f4_header("(3 4)")),
                     "malformed .npy header: expected ',' or ')' in 'shape'"},
        RejectedFile{"65 dimensions",
                     npy_file(f4_header("(" +
                                        [] {
                                          std::string ones;
                                          for (int i = 0; i < 65; ++i) ones += "1,";
                                          return ones;
                                        }() +
                                        ")")),
                     "'shape' has more than 64 dimensions"}),
    [](const ::testing::TestParamInfo<RejectedFile>& param_info) {
      return testing::identifier(param_info.param.description);
    });

TEST(Npy, RefusesToWriteBf16) {
  std::ostringstream out;
  const Status status = write_npy(out, array_of(DataType::bf16, {2}));
  EXPECT_EQ(status.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(status.message(), "bf16 has no NumPy dtype; write it as a raw file");
  EXPECT_EQ(out.str(), "");
}

class NpyFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char directory[] = "/tmp/gradsync-npy-test-XXXXXX";
    ASSERT_NE(mkdtemp(directory), nullptr);
    directory_ = directory;
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::string path(const std::string& name) const { return (directory_ / name).string(); }

  std::filesystem::path directory_;
};

TEST_F(NpyFile, RoundTripsThroughAFile) {
  const NpyArray original = array_of(DataType::f64, {4, 5});
  ASSERT_TRUE(write_npy_file(path("a.npy"), original).ok());
  NpyArray read;
  const Status status = read_npy_file(path("a.npy"), read);
  ASSERT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(read.shape, original.shape);
  EXPECT_EQ(read.data, original.data);
}

TEST_F(NpyFile, NamesThePathInEveryMessage) {
  NpyArray array;
  Status status = read_npy_file(path("missing.npy"), array);
  EXPECT_EQ(status.message(), path("missing.npy") + ": cannot open: No such file or directory");

  status = read_npy_file(directory_.string(), array);
  EXPECT_EQ(status.message(), directory_.string() + ": is a directory");

  ASSERT_TRUE(write_npy_file(path("bad.npy"), array_of(DataType::f32, {3})).ok());
  std::filesystem::resize_file(path("bad.npy"), 130);
  status = read_npy_file(path("bad.npy"), array);
  EXPECT_EQ(status.message(), path("bad.npy") +
                                  ": truncated .npy data: shape (3,) of '<f4' needs 12 bytes, "
                                  "but the file has only 2 after the header");

  status = write_npy_file(path("no/such/directory.npy"), array_of(DataType::f32, {3}));
  EXPECT_EQ(status.message(),
            path("no/such/directory.npy") + ": cannot create: No such file or directory");
}

TEST_F(NpyFile, LeavesNoFileBehindWhenItCannotWrite) {
  const Status status = write_npy_file(path("b.npy"), array_of(DataType::bf16, {3}));
  EXPECT_EQ(status.message(), path("b.npy") + ": bf16 has no NumPy dtype; write it as a raw file");
  EXPECT_FALSE(std::filesystem::exists(path("b.npy")));
}

TEST_F(NpyFile, RoundTripsARawFile) {
  const NpyArray original = array_of(DataType::bf16, {6});
  ASSERT_TRUE(write_raw_file(path("a.raw"), original.data).ok());
  EXPECT_EQ(std::filesystem::file_size(path("a.raw")), 12u);
  NpyArray read;
  const Status status = read_raw_file(path("a.raw"), DataType::bf16, 6, read);
  ASSERT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(read.type, DataType::bf16);
  EXPECT_EQ(read.shape, std::vector<std::uint64_t>{6});
  EXPECT_EQ(read.data, original.data);
}

TEST_F(NpyFile, RejectsARawFileOfTheWrongSize) {
  ASSERT_TRUE(write_raw_file(path("a.raw"), array_of(DataType::u8, {10}).data).ok());
  NpyArray array;
  Status status = read_raw_file(path("a.raw"), DataType::f32, 3, array);
  EXPECT_EQ(status.message(),
            path("a.raw") + ": the raw file has 10 bytes, but 3 f32 elements need 12 bytes");
  status = read_raw_file(path("a.raw"), DataType::f64, std::uint64_t{1} << 62, array);
  EXPECT_EQ(status.message(), path("a.raw") +
                                  ": the raw file has 10 bytes, but 4611686018427387904 f64 "
                                  "elements need more than 2^64 bytes");
  status = read_raw_file(path("missing.raw"), DataType::f32, 3, array);
  EXPECT_EQ(status.message(), path("missing.raw") + ": cannot open: No such file or directory");
}

}  // namespace
}  // namespace gradsync::cli
