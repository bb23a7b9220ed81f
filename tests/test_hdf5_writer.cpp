// Hdf5RunWriter: files read back through the HDF5 C API, refusal to clobber, clear errors, no leaked
// ids, and crash safety (a SIGKILLed writer leaves every appended row readable).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "hdf5_records.hpp"
#include "minimllm/config/input_error.hpp"
#include "minimllm/config/run_config.hpp"
#include "minimllm/metrics/checkpoint_file.hpp"
#include "minimllm/metrics/hdf5_writer.hpp"
#include "minimllm/metrics/output_file.hpp"

namespace fs = std::filesystem;
using minimllm::FileLock;
using minimllm::Hdf5RunWriter;
using minimllm::Phase;
using minimllm::StepRecord;
using minimllm::testing_support::read_enum_members;
using minimllm::testing_support::read_record_field;

namespace {

// A fresh directory per test, removed afterwards.
class Hdf5WriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("minimllm_h5_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// Every field distinct per row, so a swapped or missing column is caught.
StepRecord make_record(int i) {
  StepRecord r;
  r.step = i;
  r.loss = 4.25 - 0.5 * i;
  r.grad_norm = 0.6875 + 3 * i;
  r.text_tokens = 1000 + i;
  r.image_tokens = (std::int64_t{1} << 40) + i;  // needs 64 bits
  r.loss_targets = 900 + i;
  r.samples = 8 + i;
  r.step_seconds = 0.125 + i;
  r.phase_seconds[Phase::encoder] = 0.03125 + i;
  r.phase_seconds[Phase::llm] = 0.0625 + i;
  r.phase_seconds[Phase::grad_sync] = 0.015625 + i;
  r.phase_seconds[Phase::optimizer] = 0.0078125 + i;
  r.tokens_per_second = 12345.5 + i;
  r.model_flops = 3.5e12 + i;
  r.mfu = 0.375 + 0.001 * i;
  r.phase_seconds[Phase::data] = 0.5 + i;
  r.phase_seconds[Phase::kv_exchange] = 0.25 + i;
  r.phase_seconds[Phase::boundary] = 0.75 + i;
  r.phase_seconds[Phase::planning] = 1.5 + i;
  r.predicted_seconds = 0.375 + i;
  r.lower_bound_seconds = 0.125 + 2 * i;
  r.boundary_bytes = (std::int64_t{1} << 41) + i;
  r.pipeline_bubble = 0.1875 + i;
  r.ideal_bubble = 0.25 + i;
  r.llm_groups = 3 + i;
  r.max_group_size = 5 + i;
  r.comm_hits = 70 + i;
  r.comm_creations = 11 + i;
  r.comm_evictions = 13 + i;
  r.comm_creation_seconds = 2.5 + i;
  r.planning_work_seconds = 3.25 + i;
  r.output_seconds = 0.001953125 + i;
  return r;
}

void expect_record_eq(const StepRecord& a, const StepRecord& b, std::size_t row) {
  SCOPED_TRACE("row " + std::to_string(row));
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.grad_norm, b.grad_norm);
  EXPECT_EQ(a.text_tokens, b.text_tokens);
  EXPECT_EQ(a.image_tokens, b.image_tokens);
  EXPECT_EQ(a.loss_targets, b.loss_targets);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.step_seconds, b.step_seconds);
  EXPECT_EQ(a.phase_seconds[Phase::encoder], b.phase_seconds[Phase::encoder]);
  EXPECT_EQ(a.phase_seconds[Phase::llm], b.phase_seconds[Phase::llm]);
  EXPECT_EQ(a.phase_seconds[Phase::grad_sync], b.phase_seconds[Phase::grad_sync]);
  EXPECT_EQ(a.phase_seconds[Phase::optimizer], b.phase_seconds[Phase::optimizer]);
  EXPECT_EQ(a.tokens_per_second, b.tokens_per_second);
  EXPECT_EQ(a.model_flops, b.model_flops);
  EXPECT_EQ(a.mfu, b.mfu);
  EXPECT_EQ(a.phase_seconds[Phase::data], b.phase_seconds[Phase::data]);
  EXPECT_EQ(a.phase_seconds[Phase::kv_exchange], b.phase_seconds[Phase::kv_exchange]);
  EXPECT_EQ(a.phase_seconds[Phase::boundary], b.phase_seconds[Phase::boundary]);
  EXPECT_EQ(a.phase_seconds[Phase::planning], b.phase_seconds[Phase::planning]);
  EXPECT_EQ(a.predicted_seconds, b.predicted_seconds);
  EXPECT_EQ(a.lower_bound_seconds, b.lower_bound_seconds);
  EXPECT_EQ(a.boundary_bytes, b.boundary_bytes);
  EXPECT_EQ(a.llm_groups, b.llm_groups);
  EXPECT_EQ(a.max_group_size, b.max_group_size);
  EXPECT_EQ(a.pipeline_bubble, b.pipeline_bubble);
  EXPECT_EQ(a.ideal_bubble, b.ideal_bubble);
  EXPECT_EQ(a.comm_hits, b.comm_hits);
  EXPECT_EQ(a.comm_creations, b.comm_creations);
  EXPECT_EQ(a.comm_evictions, b.comm_evictions);
  EXPECT_EQ(a.comm_creation_seconds, b.comm_creation_seconds);
  EXPECT_EQ(a.planning_work_seconds, b.planning_work_seconds);
  EXPECT_EQ(a.output_seconds, b.output_seconds);
}

// The reader's own view of the schema, written independently of the writer's table.
struct Member {
  const char* name;
  std::size_t offset;
  hid_t type;
};
std::size_t phase_offset(Phase phase) {
  return offsetof(StepRecord, phase_seconds) + static_cast<std::size_t>(phase) * sizeof(double);
}
std::vector<Member> expected_members() {
  return {{"step", offsetof(StepRecord, step), H5T_NATIVE_INT32},
          {"loss", offsetof(StepRecord, loss), H5T_NATIVE_DOUBLE},
          {"grad_norm", offsetof(StepRecord, grad_norm), H5T_NATIVE_DOUBLE},
          {"text_tokens", offsetof(StepRecord, text_tokens), H5T_NATIVE_INT64},
          {"image_tokens", offsetof(StepRecord, image_tokens), H5T_NATIVE_INT64},
          {"loss_targets", offsetof(StepRecord, loss_targets), H5T_NATIVE_INT64},
          {"samples", offsetof(StepRecord, samples), H5T_NATIVE_INT32},
          {"step_seconds", offsetof(StepRecord, step_seconds), H5T_NATIVE_DOUBLE},
          {"encoder_seconds", phase_offset(Phase::encoder), H5T_NATIVE_DOUBLE},
          {"llm_seconds", phase_offset(Phase::llm), H5T_NATIVE_DOUBLE},
          {"grad_sync_seconds", phase_offset(Phase::grad_sync), H5T_NATIVE_DOUBLE},
          {"optimizer_seconds", phase_offset(Phase::optimizer), H5T_NATIVE_DOUBLE},
          {"tokens_per_second", offsetof(StepRecord, tokens_per_second), H5T_NATIVE_DOUBLE},
          {"model_flops", offsetof(StepRecord, model_flops), H5T_NATIVE_DOUBLE},
          {"mfu", offsetof(StepRecord, mfu), H5T_NATIVE_DOUBLE},
          {"data_seconds", phase_offset(Phase::data), H5T_NATIVE_DOUBLE},
          {"kv_exchange_seconds", phase_offset(Phase::kv_exchange), H5T_NATIVE_DOUBLE},
          {"boundary_seconds", phase_offset(Phase::boundary), H5T_NATIVE_DOUBLE},
          {"pipeline_seconds", phase_offset(Phase::pipeline), H5T_NATIVE_DOUBLE},
          {"planning_seconds", phase_offset(Phase::planning), H5T_NATIVE_DOUBLE},
          {"predicted_seconds", offsetof(StepRecord, predicted_seconds), H5T_NATIVE_DOUBLE},
          {"lower_bound_seconds", offsetof(StepRecord, lower_bound_seconds), H5T_NATIVE_DOUBLE},
          {"boundary_bytes", offsetof(StepRecord, boundary_bytes), H5T_NATIVE_INT64},
          {"intra_node_bytes", offsetof(StepRecord, intra_node_bytes), H5T_NATIVE_INT64},
          {"inter_node_bytes", offsetof(StepRecord, inter_node_bytes), H5T_NATIVE_INT64},
          {"movement_bytes", offsetof(StepRecord, movement_bytes), H5T_NATIVE_INT64},
          {"movement_seconds", offsetof(StepRecord, movement_seconds), H5T_NATIVE_DOUBLE},
          {"pipeline_bubble", offsetof(StepRecord, pipeline_bubble), H5T_NATIVE_DOUBLE},
          {"ideal_bubble", offsetof(StepRecord, ideal_bubble), H5T_NATIVE_DOUBLE},
          {"llm_groups", offsetof(StepRecord, llm_groups), H5T_NATIVE_INT32},
          {"max_group_size", offsetof(StepRecord, max_group_size), H5T_NATIVE_INT32},
          {"comm_hits", offsetof(StepRecord, comm_hits), H5T_NATIVE_INT64},
          {"comm_creations", offsetof(StepRecord, comm_creations), H5T_NATIVE_INT64},
          {"comm_evictions", offsetof(StepRecord, comm_evictions), H5T_NATIVE_INT64},
          {"comm_creation_seconds", offsetof(StepRecord, comm_creation_seconds), H5T_NATIVE_DOUBLE},
          {"planning_work_seconds", offsetof(StepRecord, planning_work_seconds), H5T_NATIVE_DOUBLE},
          {"output_seconds", offsetof(StepRecord, output_seconds), H5T_NATIVE_DOUBLE}};
}

// Reads /steps after checking that the file's compound type has exactly the expected members,
// each with the expected class and size.
std::vector<StepRecord> read_steps(const std::string& path) {
  std::vector<StepRecord> rows;
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0) << path;
  if (file < 0) return rows;
  hid_t dset = H5Dopen2(file, "/steps", H5P_DEFAULT);
  EXPECT_GE(dset, 0);
  hid_t ftype = H5Dget_type(dset);
  const auto members = expected_members();
  EXPECT_EQ(H5Tget_class(ftype), H5T_COMPOUND);
  EXPECT_EQ(H5Tget_nmembers(ftype), static_cast<int>(members.size()));
  hid_t mtype = H5Tcreate(H5T_COMPOUND, sizeof(StepRecord));
  for (const Member& m : members) {
    const int idx = H5Tget_member_index(ftype, m.name);
    EXPECT_GE(idx, 0) << "missing member " << m.name;
    if (idx >= 0) {
      hid_t mt = H5Tget_member_type(ftype, static_cast<unsigned>(idx));
      EXPECT_EQ(H5Tget_class(mt), H5Tget_class(m.type)) << m.name;
      EXPECT_EQ(H5Tget_size(mt), H5Tget_size(m.type)) << m.name;
      H5Tclose(mt);
    }
    H5Tinsert(mtype, m.name, m.offset, m.type);
  }
  hid_t space = H5Dget_space(dset);
  EXPECT_EQ(H5Sget_simple_extent_ndims(space), 1);
  hsize_t dims[1] = {0}, max_dims[1] = {0};
  H5Sget_simple_extent_dims(space, dims, max_dims);
  EXPECT_EQ(max_dims[0], H5S_UNLIMITED);
  rows.resize(dims[0]);
  if (dims[0] > 0) {
    EXPECT_GE(H5Dread(dset, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), 0);
  }
  H5Sclose(space);
  H5Tclose(mtype);
  H5Tclose(ftype);
  H5Dclose(dset);
  H5Fclose(file);
  return rows;
}

std::string read_string_attr(hid_t obj, const char* name) {
  hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
  EXPECT_GE(attr, 0) << name;
  if (attr < 0) return {};
  hid_t ftype = H5Aget_type(attr);
  EXPECT_EQ(H5Tget_class(ftype), H5T_STRING) << name;
  EXPECT_TRUE(H5Tis_variable_str(ftype)) << name;
  EXPECT_EQ(H5Tget_cset(ftype), H5T_CSET_UTF8) << name;
  hid_t mtype = H5Tcopy(H5T_C_S1);
  H5Tset_size(mtype, H5T_VARIABLE);
  H5Tset_cset(mtype, H5T_CSET_UTF8);
  char* data = nullptr;
  EXPECT_GE(H5Aread(attr, mtype, &data), 0);
  std::string value = data ? data : "";
  hid_t space = H5Aget_space(attr);
  H5Dvlen_reclaim(mtype, space, H5P_DEFAULT, &data);
  H5Sclose(space);
  H5Tclose(mtype);
  H5Tclose(ftype);
  H5Aclose(attr);
  return value;
}

template <typename T>
T read_numeric_attr(hid_t obj, const char* name, hid_t mem_type, H5T_class_t expected_class) {
  T value{};
  hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
  EXPECT_GE(attr, 0) << name;
  if (attr < 0) return value;
  hid_t ftype = H5Aget_type(attr);
  EXPECT_EQ(H5Tget_class(ftype), expected_class) << name;
  EXPECT_EQ(H5Tget_size(ftype), 8u) << name;
  EXPECT_GE(H5Aread(attr, mem_type, &value), 0);
  H5Tclose(ftype);
  H5Aclose(attr);
  return value;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Open HDF5 ids by kind: files, datasets, groups, datatypes (with H5F_OBJ_ALL as the file this
// counts transient types too), attributes.
std::vector<ssize_t> open_object_counts() {
  std::vector<ssize_t> counts;
  for (unsigned kind : {H5F_OBJ_FILE, H5F_OBJ_DATASET, H5F_OBJ_GROUP, H5F_OBJ_DATATYPE, H5F_OBJ_ATTR}) {
    counts.push_back(H5Fget_obj_count(H5F_OBJ_ALL, kind));
  }
  return counts;
}

bool have_h5dump() { return std::system("command -v h5dump > /dev/null 2>&1") == 0; }

}  // namespace

TEST_F(Hdf5WriterTest, WritesStepsAndAttributesReadableThroughCApi) {
  const std::string path = file("run.h5");
  {
    Hdf5RunWriter w(path, false);
    EXPECT_EQ(w.path(), path);
    w.set_run_attribute("name", std::string("tiny — ünïcode"));
    w.set_run_attribute("peak_gflops_per_rank", 123.456);
    w.set_run_attribute("seed", 9007199254740993LL);  // > 2^53: must not pass through a double
    for (int i = 0; i < 3; ++i) w.append_step(make_record(i));
  }
  const auto rows = read_steps(path);
  ASSERT_EQ(rows.size(), 3u);
  for (std::size_t i = 0; i < rows.size(); ++i)
    expect_record_eq(rows[i], make_record(static_cast<int>(i)), i);

  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t run = H5Gopen2(file, "/run", H5P_DEFAULT);
  ASSERT_GE(run, 0);
  EXPECT_EQ(read_string_attr(run, "name"), "tiny — ünïcode");
  EXPECT_EQ(read_numeric_attr<double>(run, "peak_gflops_per_rank", H5T_NATIVE_DOUBLE, H5T_FLOAT), 123.456);
  EXPECT_EQ(read_numeric_attr<long long>(run, "seed", H5T_NATIVE_LLONG, H5T_INTEGER), 9007199254740993LL);
  EXPECT_EQ(read_numeric_attr<long long>(file, "schema_version", H5T_NATIVE_LLONG, H5T_INTEGER), 3);
  hid_t steps = H5Dopen2(file, "/steps", H5P_DEFAULT);
  ASSERT_GE(steps, 0);
  const std::string units = read_string_attr(steps, "units");
  EXPECT_NE(units.find("step_seconds: s"), std::string::npos) << units;
  EXPECT_NE(units.find("tokens_per_second: token/s"), std::string::npos) << units;
  EXPECT_NE(units.find("model_flops: FLOP"), std::string::npos) << units;
  for (const Member& m : expected_members()) {
    EXPECT_NE(units.find(std::string(m.name) + ": "), std::string::npos) << "no unit for " << m.name;
  }
  hid_t dcpl = H5Dget_create_plist(steps);
  EXPECT_EQ(H5Pget_layout(dcpl), H5D_CHUNKED);
  H5Pclose(dcpl);
  H5Dclose(steps);
  H5Gclose(run);
  H5Fclose(file);
}

TEST_F(Hdf5WriterTest, ClosesEveryIdItOpens) {
  const std::vector<ssize_t> none(5, 0);
  ASSERT_EQ(open_object_counts(), none);
  const std::string path = file("ids.h5");
  {
    Hdf5RunWriter w(path, false);
    w.set_run_attribute("s", std::string("x"));
    w.set_run_attribute("d", 1.0);
    w.set_run_attribute("i", 1LL);
    w.set_run_attribute("i", 2LL);
    w.append_step(make_record(0));
    // The writer holds the file, /run, /steps and its memory compound type; no attribute.
    EXPECT_EQ(open_object_counts(), (std::vector<ssize_t>{1, 1, 1, 1, 0}));
  }
  EXPECT_EQ(open_object_counts(), none);
  // A constructor that throws leaks nothing either.
  EXPECT_THROW(Hdf5RunWriter(path, false), minimllm::InputError);
  EXPECT_THROW(Hdf5RunWriter(file("no-such-dir/x.h5"), false), std::runtime_error);
  EXPECT_EQ(open_object_counts(), none);
}

TEST_F(Hdf5WriterTest, RefusesExistingFileWithoutOverwriteAndReplacesWithIt) {
  const std::string path = file("exists.h5");
  {
    Hdf5RunWriter w(path, false);
    w.set_run_attribute("name", std::string("first"));
    for (int i = 0; i < 3; ++i) w.append_step(make_record(i));
  }
  const std::string before = file_bytes(path);
  ASSERT_FALSE(before.empty());
  try {
    Hdf5RunWriter w(path, false);
    FAIL() << "expected InputError";
  } catch (const minimllm::InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("--overwrite"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_EQ(file_bytes(path), before);

  {
    Hdf5RunWriter w(path, true);
    w.append_step(make_record(7));
  }
  const auto rows = read_steps(path);
  ASSERT_EQ(rows.size(), 1u);
  expect_record_eq(rows[0], make_record(7), 0);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_EQ(H5Aexists_by_name(f, "/run", "name", H5P_DEFAULT), 0);  // old attribute gone
  H5Fclose(f);

  // Overwrite also replaces a file that is not HDF5 at all.
  const std::string junk = file("junk.h5");
  std::ofstream(junk) << "not an hdf5 file\n";
  { Hdf5RunWriter w(junk, true); }
  EXPECT_EQ(read_steps(junk).size(), 0u);
}

// A second writer with overwrite on a file another writer holds (a running job) is refused before the
// file is touched: the running writer keeps appending and its file stays readable.
TEST_F(Hdf5WriterTest, OverwriteOfAFileBeingWrittenIsRefused) {
  const std::string path = file("running.h5");
  Hdf5RunWriter running(path, false);
  running.set_run_attribute("name", std::string("running"));
  for (int i = 0; i < 3; ++i) running.append_step(make_record(i));
  const std::string before = file_bytes(path);
  ASSERT_TRUE(fs::exists(FileLock::lock_path(path)));
  for (bool overwrite : {true, false}) {
    try {
      Hdf5RunWriter second(path, overwrite);
      FAIL() << "expected InputError (overwrite " << overwrite << ")";
    } catch (const minimllm::InputError& e) {
      const std::string msg = e.what();
      if (overwrite) {
        EXPECT_EQ(msg, path + " is being written by another running minimllm (pid " +
                           std::to_string(::getpid()) + ")");
      }
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
    EXPECT_EQ(file_bytes(path), before);  // not truncated
  }
  EXPECT_THROW(FileLock::check_not_busy(path), minimllm::InputError);
  running.append_step(make_record(3));
  running.close();  // fsynced; the lock file removed
  EXPECT_FALSE(fs::exists(FileLock::lock_path(path)));
  EXPECT_EQ(read_steps(path).size(), 4u);
  EXPECT_NO_THROW(FileLock::check_not_busy(path));
  // Once the first writer has closed, overwrite replaces the file.
  { Hdf5RunWriter again(path, true); }
  EXPECT_EQ(read_steps(path).size(), 0u);
}

// A lock file left by a killed process holds no lock: it never blocks a later run, which removes it.
TEST_F(Hdf5WriterTest, StaleLockFileDoesNotBlock) {
  const std::string path = file("stale.h5");
  std::ofstream(FileLock::lock_path(path)) << "999999\n";
  EXPECT_NO_THROW(FileLock::check_not_busy(path));
  {
    Hdf5RunWriter w(path, false);
    w.append_step(make_record(0));
    w.close();
  }
  EXPECT_FALSE(fs::exists(FileLock::lock_path(path)));
  EXPECT_EQ(read_steps(path).size(), 1u);
}

// A writer destroyed by an exception before its first step row (set-up failed) leaves no file behind;
// one destroyed in order keeps its file.
TEST_F(Hdf5WriterTest, SetUpFailureLeavesNoFile) {
  const std::string path = file("setup.h5");
  try {
    Hdf5RunWriter w(path, false);
    w.set_run_attribute("name", std::string("set-up"));
    throw std::runtime_error("set-up failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(FileLock::lock_path(path)));
  { Hdf5RunWriter w(path, false); }
  EXPECT_TRUE(fs::exists(path));
  // The file is made as <path>.<pid>.part and renamed once its layout is on disk: none is left.
  for (const auto& entry : fs::directory_iterator(fs::path(path).parent_path()))
    EXPECT_NE(entry.path().extension(), ".part") << entry.path();
}

// Reads a whole 2-D table as doubles (HDF5 converts int32 on read).
std::vector<double> read_table(const std::string& path, const std::string& name, hsize_t dims[2]) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t dset = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  hid_t space = H5Dget_space(dset);
  EXPECT_EQ(H5Sget_simple_extent_ndims(space), 2);
  H5Sget_simple_extent_dims(space, dims, nullptr);
  std::vector<double> values(dims[0] * dims[1]);
  H5Dread(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  H5Sclose(space), H5Dclose(dset), H5Fclose(file);
  return values;
}

TEST_F(Hdf5WriterTest, PerRankTablesGrowOneRowPerCall) {
  const std::string path = file("tables.h5");
  {
    Hdf5RunWriter writer(path, false);
    writer.append_row("/ranks/llm_seconds", std::vector<double>{0.5, 1.5, 2.5});
    writer.append_row("/plans/llm_group_of_rank", std::vector<int>{0, 0, -1});
    writer.append_row("/ranks/llm_seconds", std::vector<double>{3.5, 4.5, 5.5});
    EXPECT_THROW(writer.append_row("/ranks/llm_seconds", std::vector<double>{1.0}), std::invalid_argument);
    writer.flush();
  }
  hsize_t dims[2] = {0, 0};
  EXPECT_EQ(read_table(path, "/ranks/llm_seconds", dims),
            (std::vector<double>{0.5, 1.5, 2.5, 3.5, 4.5, 5.5}));
  EXPECT_EQ(dims[0], 2u);
  EXPECT_EQ(dims[1], 3u);
  EXPECT_EQ(read_table(path, "/plans/llm_group_of_rank", dims), (std::vector<double>{0, 0, -1}));
  EXPECT_EQ(dims[0], 1u);
}

TEST_F(Hdf5WriterTest, OneDimensionalTablesCarryAttributes) {
  const std::string path = file("values.h5");
  {
    Hdf5RunWriter writer(path, false);
    writer.append_value("/plans/counts", 3);
    writer.append_value("/plans/counts", 1);
    writer.set_table_attribute("/plans/counts", "units", "sample");
    EXPECT_THROW(writer.set_table_attribute("/plans/nothing", "units", "x"), std::invalid_argument);
    // A 1-D table is not a 2-D table of one column.
    EXPECT_THROW(writer.append_row("/plans/counts", std::vector<int>{1}), std::invalid_argument);
    writer.flush();
  }
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t dset = H5Dopen2(f, "/plans/counts", H5P_DEFAULT);
  ASSERT_GE(dset, 0);
  hid_t space = H5Dget_space(dset);
  EXPECT_EQ(H5Sget_simple_extent_ndims(space), 1);
  hsize_t dims[1] = {0};
  H5Sget_simple_extent_dims(space, dims, nullptr);
  ASSERT_EQ(dims[0], 2u);
  int values[2] = {0, 0};
  EXPECT_GE(H5Dread(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), 0);
  EXPECT_EQ(values[0], 3);
  EXPECT_EQ(values[1], 1);
  EXPECT_EQ(read_string_attr(dset, "units"), "sample");
  H5Sclose(space), H5Dclose(dset), H5Fclose(f);
}

// An enumerated table is an HDF5 enum: any HDF5 tool shows a code's name. It also lists its members in the
// attribute `names` (read by readers of schema_version 2), takes only its members, and keeps them.
TEST_F(Hdf5WriterTest, EnumTablesNameEveryCode) {
  const std::string path = file("enum.h5");
  const std::vector<std::string> members = {"deck", "static", "orch", "dhp"};
  {
    Hdf5RunWriter writer(path, false);
    writer.append_enum("/plans/policy", members, "orch");
    writer.append_enum("/plans/policy", members, "deck");
    try {
      writer.append_enum("/plans/policy", members, "grouped");
      ADD_FAILURE() << "a value outside the members was written";
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("\"grouped\""), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("/plans/policy"), std::string::npos) << e.what();
    }
    EXPECT_THROW(writer.append_enum("/plans/policy", {"deck", "static"}, "deck"), std::invalid_argument);
    EXPECT_THROW(writer.append_value("/plans/policy", 1), std::invalid_argument);  // a code without a name
    writer.append_value("/plans/counts", 1);
    EXPECT_THROW(writer.append_enum("/plans/counts", members, "dhp"), std::invalid_argument);
    writer.append_enum("/plans/policy", members, "dhp");
    writer.flush();
  }
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_EQ(read_enum_members(f, "/plans/policy"), members);
  hid_t dset = H5Dopen2(f, "/plans/policy", H5P_DEFAULT);
  ASSERT_GE(dset, 0);
  hid_t type = H5Dget_type(dset);
  EXPECT_EQ(H5Tget_class(type), H5T_ENUM);
  EXPECT_EQ(H5Tget_size(type), 4u);
  EXPECT_EQ(H5Tget_nmembers(type), static_cast<int>(members.size()));
  hid_t space = H5Dget_space(dset);
  hsize_t dims[1] = {0};
  H5Sget_simple_extent_dims(space, dims, nullptr);
  ASSERT_EQ(dims[0], 3u);  // the refused values left no row
  // The codes, read as plain integers (HDF5 converts an enum to an integer type).
  int codes[3] = {-1, -1, -1};
  EXPECT_GE(H5Dread(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, codes), 0);
  EXPECT_EQ(codes[0], 2);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(codes[2], 3);
  EXPECT_EQ(read_string_attr(dset, "names"), "deck, static, orch, dhp");
  H5Sclose(space), H5Tclose(type), H5Dclose(dset), H5Fclose(f);
}

// A record table's values are found by field name, with their units; a table's fields cannot change.
TEST_F(Hdf5WriterTest, RecordTablesHaveNamedFields) {
  const std::string path = file("records.h5");
  const std::vector<minimllm::Column> columns = {{"step_s", "s"}, {"fits", "1"}, {"bytes", "byte"}};
  {
    Hdf5RunWriter writer(path, false);
    writer.append_record("/simulation/static", columns, {0.25, 1.0, 4096.0});
    writer.append_record("/simulation/static", columns, {0.5, 0.0, 8192.0});
    EXPECT_THROW(writer.append_record("/simulation/static", columns, {1.0}), std::invalid_argument);
    std::vector<minimllm::Column> reordered = {columns[1], columns[0], columns[2]};
    EXPECT_THROW(writer.append_record("/simulation/static", reordered, {1.0, 0.5, 1.0}),
                 std::invalid_argument);
    writer.flush();
  }
  EXPECT_EQ(read_record_field(path, "/simulation/static", "fits"), (std::vector<double>{1.0, 0.0}));
  EXPECT_EQ(read_record_field(path, "/simulation/static", "bytes"), (std::vector<double>{4096.0, 8192.0}));
  EXPECT_EQ(read_record_field(path, "/simulation/static", "step_s"), (std::vector<double>{0.25, 0.5}));
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t dset = H5Dopen2(f, "/simulation/static", H5P_DEFAULT);
  EXPECT_EQ(read_string_attr(dset, "units"), "step_s: s, fits: 1, bytes: byte");
  H5Dclose(dset), H5Fclose(f);
}

TEST_F(Hdf5WriterTest, RunAttributesCanBeAddedAfterTheWriterClosed) {
  const std::string path = file("verdict.h5");
  {
    Hdf5RunWriter writer(path, false);
    writer.set_run_attributes({{"name", std::string("first")}, {"ranks", 2LL}, {"peak", 1.5}});
    for (int i = 0; i < 2; ++i) writer.append_step(make_record(i));
  }
  Hdf5RunWriter::update_run_attributes(path,
                                       {{"verdict", std::string("VALID")}, {"fom", 1234.5}, {"ranks", 3LL}});
  const auto rows = read_steps(path);  // rows written before are kept
  ASSERT_EQ(rows.size(), 2u);
  expect_record_eq(rows[1], make_record(1), 1);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t run = H5Gopen2(f, "/run", H5P_DEFAULT);
  EXPECT_EQ(read_string_attr(run, "name"), "first");
  EXPECT_EQ(read_string_attr(run, "verdict"), "VALID");
  EXPECT_EQ(read_numeric_attr<double>(run, "fom", H5T_NATIVE_DOUBLE, H5T_FLOAT), 1234.5);
  EXPECT_EQ(read_numeric_attr<double>(run, "peak", H5T_NATIVE_DOUBLE, H5T_FLOAT), 1.5);
  EXPECT_EQ(read_numeric_attr<long long>(run, "ranks", H5T_NATIVE_LLONG, H5T_INTEGER), 3);
  H5Gclose(run), H5Fclose(f);

  // A missing file, or an HDF5 file that is not a run, is a runtime error naming the path.
  for (const std::string& bad : {file("missing.h5"), file("other.h5")}) {
    if (bad == file("other.h5")) {
      hid_t other = H5Fcreate(bad.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
      H5Fclose(other);
    }
    try {
      Hdf5RunWriter::update_run_attributes(bad, {{"verdict", std::string("VALID")}});
      ADD_FAILURE() << "expected std::runtime_error for " << bad;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(open_object_counts(), std::vector<ssize_t>(5, 0));
}

TEST_F(Hdf5WriterTest, UnwritablePathIsARuntimeErrorNamingThePath) {
  const std::string path = "/nonexistent-minimllm-dir/x.h5";
  try {
    Hdf5RunWriter w(path, false);
    FAIL() << "expected std::runtime_error";
  } catch (const minimllm::InputError& e) {
    FAIL() << "an unwritable path is not an InputError: " << e.what();
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(Hdf5WriterTest, RunAttributeSetTwiceIsReplaced) {
  const std::string path = file("attr.h5");
  {
    Hdf5RunWriter w(path, false);
    w.set_run_attribute("name", std::string("a much longer first value"));
    w.set_run_attribute("name", std::string("second"));
    w.set_run_attribute("lr", 1.0);
    w.set_run_attribute("lr", 2.5);
    w.set_run_attribute("steps", 10LL);
    w.set_run_attribute("steps", 20LL);
    w.set_run_attribute("changes_type", 3LL);
    w.set_run_attribute("changes_type", std::string("now a string"));
  }
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t run = H5Gopen2(f, "/run", H5P_DEFAULT);
  ASSERT_GE(run, 0);
  H5O_info_t info;
  ASSERT_GE(H5Oget_info2(run, &info, H5O_INFO_NUM_ATTRS), 0);
  EXPECT_EQ(info.num_attrs, 4u);
  EXPECT_EQ(read_string_attr(run, "name"), "second");
  EXPECT_EQ(read_numeric_attr<double>(run, "lr", H5T_NATIVE_DOUBLE, H5T_FLOAT), 2.5);
  EXPECT_EQ(read_numeric_attr<long long>(run, "steps", H5T_NATIVE_LLONG, H5T_INTEGER), 20);
  EXPECT_EQ(read_string_attr(run, "changes_type"), "now a string");
  H5Gclose(run);
  H5Fclose(f);
}

// The child writes 5 steps then SIGKILLs itself with the writer still open: nothing runs after the
// last append_step, so every row must already be on disk. The child touches no MPI, only the writer.
TEST_F(Hdf5WriterTest, SigkilledWriterLeavesEveryAppendedRowReadable) {
  const std::string path = file("killed.h5");
  const pid_t pid = ::fork();
  ASSERT_NE(pid, -1);
  if (pid == 0) {
    try {
      auto* w = new Hdf5RunWriter(path, false);  // deliberately never destroyed
      w->set_run_attribute("name", std::string("killed"));
      for (int i = 0; i < 5; ++i) w->append_step(make_record(i));
    } catch (...) {
      ::_exit(3);
    }
    ::raise(SIGKILL);
    ::_exit(4);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with code " << WEXITSTATUS(status);
  ASSERT_EQ(WTERMSIG(status), SIGKILL);

  const auto rows = read_steps(path);
  ASSERT_EQ(rows.size(), 5u);
  for (std::size_t i = 0; i < rows.size(); ++i)
    expect_record_eq(rows[i], make_record(static_cast<int>(i)), i);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t run = H5Gopen2(f, "/run", H5P_DEFAULT);
  EXPECT_EQ(read_string_attr(run, "name"), "killed");
  H5Gclose(run);
  H5Fclose(f);

  if (have_h5dump()) {
    const std::string cmd = "h5dump '" + path + "' > /dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
}

TEST_F(Hdf5WriterTest, CheckpointFileRoundTripsAndReplacesThePreviousWhole) {
  const std::string path = file("run.ckpt.h5");
  minimllm::CheckpointContents first;
  first.attributes = {
      {"next_step", 10LL}, {"planning_gflops_per_rank", 2.5}, {"deck_name", std::string("q")}};
  first.arrays = {{"params", {1.0f, -2.0f, 3.5f}}, {"adamw_m", {0.25f}}};
  minimllm::write_checkpoint_file(path, first);
  minimllm::CheckpointContents second = first;
  second.attributes[0].value = 20LL;
  second.arrays[0].second = {7.0f, 8.0f, 9.0f};
  minimllm::write_checkpoint_file(path, second);  // replaces the first, through a renamed temporary
  const minimllm::CheckpointContents read = minimllm::read_checkpoint_file(path);
  EXPECT_EQ(read.integer("next_step", path), 20);
  EXPECT_EQ(read.real("planning_gflops_per_rank", path), 2.5);
  EXPECT_EQ(read.text("deck_name", path), "q");
  EXPECT_EQ(read.array("params", path), (std::vector<float>{7.0f, 8.0f, 9.0f}));
  EXPECT_EQ(read.array("adamw_m", path), (std::vector<float>{0.25f}));
  EXPECT_THROW(read.integer("missing", path), minimllm::InputError);
  EXPECT_THROW(read.text("next_step", path), minimllm::InputError);  // an integer, not a string
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1u);  // no temporary left beside it
}

TEST_F(Hdf5WriterTest, CheckpointFileFailuresNameTheFile) {
  const std::string run = file("run.h5");
  {
    Hdf5RunWriter w(run, false);
    w.append_step(make_record(0));
    w.close();
  }
  EXPECT_THROW(minimllm::read_checkpoint_file(run), minimllm::InputError);  // a run file, not a checkpoint
  EXPECT_THROW(minimllm::read_checkpoint_file(file("missing.ckpt.h5")), minimllm::InputError);
  const std::string unwritable = file("no/such/dir/run.ckpt.h5");
  try {
    minimllm::write_checkpoint_file(unwritable, {});
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(unwritable), std::string::npos) << e.what();
  }
}

// Names another user may plant in a shared directory: a link at the lock or at the output is
// refused, and one at the temporary names of before (<path>.<pid>.part, <checkpoint>.tmp.<pid>, guessable
// from the pid) is never followed: the writers make their temporary files with mkstemp.
TEST_F(Hdf5WriterTest, PlantedLinksAreNeverFollowed) {
  const std::string victim = file("victim.txt");
  std::ofstream(victim) << "victim\n";
  const auto victim_text = [&] {
    std::ifstream in(victim);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string path = file("planted.h5");
  fs::create_symlink(victim, FileLock::lock_path(path));
  EXPECT_THROW(Hdf5RunWriter(path, false), minimllm::InputError);
  EXPECT_THROW(FileLock::check_not_busy(path), minimllm::InputError);
  fs::remove(FileLock::lock_path(path));
  const std::string part = path + "." + std::to_string(::getpid()) + ".part";
  fs::create_symlink(victim, part);
  const std::string checkpoint = file("planted.ckpt.h5");
  const std::string temporary = checkpoint + ".tmp." + std::to_string(::getpid());
  fs::create_symlink(victim, temporary);
  {
    Hdf5RunWriter w(path, false);
    w.append_step(make_record(0));
    w.close();
  }
  minimllm::CheckpointContents c;
  c.attributes = {{"next_step", 1LL}};
  c.arrays = {{"params", {1.0f}}};
  minimllm::write_checkpoint_file(checkpoint, c);
  EXPECT_EQ(victim_text(), "victim\n");
  EXPECT_TRUE(fs::is_symlink(part));
  EXPECT_TRUE(fs::is_symlink(temporary));
  EXPECT_EQ(read_steps(path).size(), 1u);
  EXPECT_EQ(minimllm::read_checkpoint_file(checkpoint).array("params", checkpoint), std::vector<float>{1.0f});
  const std::string linked = file("linked.h5");
  fs::create_symlink(victim, linked);
  EXPECT_THROW(Hdf5RunWriter(linked, true), minimllm::InputError);  // even with overwrite
  EXPECT_THROW(minimllm::write_checkpoint_file(linked, c), minimllm::InputError);
  EXPECT_EQ(victim_text(), "victim\n");
  EXPECT_TRUE(fs::is_symlink(linked));
}

// A FIFO at the lock's name is refused at once (open used to block until a writer came).
TEST_F(Hdf5WriterTest, FifoAtTheLockIsRefusedWithoutBlocking) {
  const std::string path = file("fifo.h5");
  ASSERT_EQ(::mkfifo(FileLock::lock_path(path).c_str(), 0644), 0);
  EXPECT_THROW(FileLock::check_not_busy(path), minimllm::InputError);
  EXPECT_THROW(Hdf5RunWriter(path, false), minimllm::InputError);
  EXPECT_FALSE(fs::exists(path));
}

// One flipped bit in a dataset, or a changed attribute, makes the checkpoint invalid input naming it.
TEST_F(Hdf5WriterTest, CheckpointFileDamageIsInputError) {
  const std::string path = file("damaged.ckpt.h5");
  minimllm::CheckpointContents c;
  c.attributes = {{"next_step", 5LL}, {"deck_name", std::string("q")}};
  c.arrays = {{"params", {1.0f, 2.0f, 3.0f}}};
  const auto expect_damage = [&](const std::string& says) {
    try {
      minimllm::read_checkpoint_file(path);
      ADD_FAILURE() << "damage not seen; expected: " << says;
    } catch (const minimllm::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  minimllm::write_checkpoint_file(path, c);
  {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "state/params", H5P_DEFAULT);
    float values[3];
    H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values);
    std::uint32_t bits;
    std::memcpy(&bits, &values[1], sizeof(bits));
    bits ^= 1u;  // the lowest mantissa bit
    std::memcpy(&values[1], &bits, sizeof(bits));
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values);
    H5Dclose(d), H5Fclose(f);
  }
  expect_damage("damaged checkpoint: /state/params does not match its sha256");
  minimllm::write_checkpoint_file(path, c);
  {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, "checkpoint", H5P_DEFAULT);
    EXPECT_GE(H5Adelete(g, "next_step"), 0);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(g, "next_step", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    const long long next = 1LL << 40;
    EXPECT_GE(H5Awrite(a, H5T_NATIVE_LLONG, &next), 0);
    H5Aclose(a), H5Sclose(space), H5Gclose(g), H5Fclose(f);
  }
  expect_damage("the /checkpoint attributes do not match their sha256");
}

// What a killed writer left (its .part file, a checkpoint's temporary) is removed by the next writer of
// the same path, which holds the lock; nothing else beside it is touched, and never through a link.
TEST_F(Hdf5WriterTest, TheNextWriterRemovesAKilledWritersTemporaries) {
  const std::string path = file("left.h5");
  const std::string victim = file("victim.txt");
  std::ofstream(victim) << "victim\n";
  for (const std::string& stale : {path + ".12345.part", path + ".999.AbC123.part"})
    std::ofstream(stale) << "stale";
  std::ofstream(path + ".notes.txt") << "kept";
  fs::create_symlink(victim, path + ".1.part");
  {
    Hdf5RunWriter w(path, false);
    w.close();
  }
  EXPECT_FALSE(fs::exists(path + ".12345.part"));
  EXPECT_FALSE(fs::exists(path + ".999.AbC123.part"));
  EXPECT_TRUE(fs::exists(path + ".notes.txt"));
  EXPECT_TRUE(fs::is_symlink(path + ".1.part"));
  EXPECT_TRUE(fs::exists(victim));
  const std::string checkpoint = file("left.ckpt.h5");
  std::ofstream(checkpoint + ".tmp.4242") << "stale";
  std::ofstream(checkpoint + ".tmp.Xy12Zw") << "stale";
  EXPECT_EQ(minimllm::remove_stale_temporaries(checkpoint, ".tmp.", ""), 2);
  EXPECT_FALSE(fs::exists(checkpoint + ".tmp.4242"));
}
