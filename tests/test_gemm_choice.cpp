// runtime.gemm: the model's GEMM shape classes, the same backend per class on every rank under `auto`,
// fixed modes, dispatch by class, and the generic-OpenBLAS warning. No timing assertions.
#include <gtest/gtest.h>

#include <vector>

#include "minimllm/driver/gemm_choice.hpp"
#include "mpi_world.hpp"

namespace minimllm {
namespace {

using testing_support::world_size;

std::vector<int> backend_codes(const GemmChoice& choice) {
  std::vector<int> codes;
  for (const auto& entry : choice.selection) codes.push_back(static_cast<int>(entry.second));
  return codes;
}

TEST(GemmChoice, ModelClassesAreTheThreeProductsOfEveryDistinctWeightShape) {
  const ModelConfig model;  // encoder 32 wide (patch 4, 3 channels), LLM 64 wide, vocab 64
  const auto classes = model_gemm_classes(model);
  for (std::size_t i = 0; i < classes.size(); ++i)
    for (std::size_t j = i + 1; j < classes.size(); ++j)
      EXPECT_FALSE(classes[i] == classes[j]) << i << " " << j;
  EXPECT_EQ(classes.size() % 3, 0u);
  const auto has = [&](const std::string& name) {
    for (const GemmShapeClass& c : classes)
      if (to_string(c) == name) return true;
    return false;
  };
  for (const char* name :
       {"fwd 48x32", "dgrad 48x32", "wgrad 48x32", "fwd 64x192", "wgrad 256x64", "dgrad 64x64"})
    EXPECT_TRUE(has(name)) << name;
}

TEST(GemmChoice, AutoPicksTheSameBackendOnEveryRank) {
  const World world = World::of(MPI_COMM_WORLD);
  const auto classes = model_gemm_classes(ModelConfig{});
  for (int run = 0; run < 2; ++run) {  // measured, then this process's cached choice
    const GemmChoice choice = choose_gemm("auto", classes, 64, GemmPrecision::fp32, world);
    ASSERT_EQ(choice.selection.size(), classes.size());
    std::vector<int> codes = backend_codes(choice), all(codes.size() * world_size());
    MPI_Allgather(codes.data(), static_cast<int>(codes.size()), MPI_INT, all.data(),
                  static_cast<int>(codes.size()), MPI_INT, MPI_COMM_WORLD);
    for (int r = 1; r < world_size(); ++r)
      for (std::size_t i = 0; i < codes.size(); ++i)
        EXPECT_EQ(all[r * codes.size() + i], all[i]) << "rank " << r;
    EXPECT_NE(choice.line.find("auto chose"), std::string::npos) << choice.line;
  }
}

TEST(GemmChoice, FixedModesUseOneBackend) {
  const World world = World::of(MPI_COMM_WORLD);
  const auto classes = model_gemm_classes(ModelConfig{});
  const GemmBackend host = default_gemm_backend();
  const GemmChoice portable = choose_gemm("portable", classes, 64, GemmPrecision::fp32, world);
  const GemmChoice blas = choose_gemm("blas", classes, 64, GemmPrecision::fp32, world);
  for (const auto& [cls, backend] : portable.selection)
    EXPECT_EQ(backend, host == GemmBackend::blas ? GemmBackend::portable : host) << to_string(cls);
  for (const auto& [cls, backend] : blas.selection) EXPECT_EQ(backend, host) << to_string(cls);
}

TEST(GemmChoice, GemmWithoutABackendRunsTheSelectedOne) {
  t_mat a("a", 5, 7), b("b", 7, 3), c("c", 5, 3), expected("expected", 5, 3);
  Kokkos::deep_copy(a, 0.3f), Kokkos::deep_copy(b, 0.7f);
  const GemmShapeClass cls = gemm_shape_class(Trans::no, Trans::no, b, c);
  EXPECT_EQ(to_string(cls), "fwd 7x3");
  EXPECT_EQ(to_string(gemm_shape_class(Trans::yes, Trans::no, a, b)), "wgrad 7x3");  // C's shape
  gemm(Trans::no, Trans::no, 1.0f, a, b, 0.0f, expected, GemmBackend::portable);
  {
    const GemmSelectionScope scope({{cls, GemmBackend::portable}});
    EXPECT_EQ(selected_gemm_backend(cls), GemmBackend::portable);
    gemm(Trans::no, Trans::no, 1.0f, a, b, 0.0f, c, GemmPrecision::fp32);
  }
  EXPECT_EQ(selected_gemm_backend(cls), default_gemm_backend());  // restored
  const auto got = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
  const auto want = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), expected);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(got(i, j), want(i, j));
}

TEST(GemmChoice, SelectionRoundTripsThroughItsCheckpointText) {
  const auto classes = model_gemm_classes(ModelConfig{});
  GemmSelection selection;
  for (std::size_t i = 0; i < classes.size(); ++i)
    selection.push_back({classes[i], i % 3 == 1 ? GemmBackend::portable : GemmBackend::blas});
  const std::string text = encode_gemm_selection(selection);
  const GemmChoice back = decode_gemm_selection(text, "from checkpoint x.ckpt.h5");
  ASSERT_EQ(back.selection.size(), selection.size());
  for (std::size_t i = 0; i < selection.size(); ++i) {
    EXPECT_TRUE(back.selection[i].first == selection[i].first) << i;
    EXPECT_EQ(back.selection[i].second, selection[i].second) << i;
  }
  EXPECT_EQ(back.backend, "mixed");
  EXPECT_NE(back.line.find("x.ckpt.h5"), std::string::npos);
  EXPECT_THROW(decode_gemm_selection("fwd 3x4=mkl", "x"), std::invalid_argument);
  EXPECT_THROW(decode_gemm_selection("sideways 3x4=blas", "x"), std::invalid_argument);
}

TEST(GemmChoice, WarnsOnlyForAGenericOpenBlasCoreOnAVectorCpu) {
  GemmChoice choice;
  choice.mode = "auto", choice.portable_classes = 3, choice.classes = 30;
  const std::string config = "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Prescott MAX_THREADS=64";
  const std::string line = generic_blas_warning("Prescott", config, true, true, choice);
  EXPECT_NE(line.find("OpenBLAS 0.3.21"), std::string::npos) << line;
  EXPECT_NE(line.find("'Prescott'"), std::string::npos) << line;
  EXPECT_NE(line.find("OPENBLAS_CORETYPE=SKYLAKEX"), std::string::npos) << line;
  EXPECT_NE(line.find("3 of 30"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);  // one line
  EXPECT_NE(generic_blas_warning("Prescott", config, false, true, choice).find("HASWELL"), std::string::npos);
  EXPECT_EQ(generic_blas_warning("SkylakeX", config, true, true, choice), "");
  EXPECT_EQ(generic_blas_warning("Prescott", config, false, false, choice), "");  // no better kernel exists
  EXPECT_EQ(generic_blas_warning("", "", true, true, choice), "");                // not OpenBLAS
}

TEST(GemmChoice, OtherProductsUseBlasOnlyWhereItIsTunedAndAllowed) {
  EXPECT_TRUE(openblas_core_is_generic("Prescott"));
  EXPECT_TRUE(openblas_core_is_generic("NEHALEM"));
  EXPECT_FALSE(openblas_core_is_generic("SkylakeX"));
  EXPECT_FALSE(openblas_core_is_generic("Zen"));
  const GemmSelectionScope all_portable({{GemmShapeClass{}, GemmBackend::portable}});
  EXPECT_FALSE(blas_for_other_products());  // runtime.gemm keeps every GEMM off BLAS
  {
    const GemmSelectionScope some_blas({{GemmShapeClass{}, GemmBackend::portable},
                                        {GemmShapeClass{Trans::yes, Trans::no, 8, 8}, GemmBackend::blas}});
    EXPECT_EQ(blas_for_other_products(),
              default_gemm_backend() == GemmBackend::blas && !openblas_core_is_generic(blas_core_name()));
  }
}

TEST(GemmChoice, WarnsWhenBlasThreadsExceedTheCoresTheRankMayUse) {
  const std::string line = blas_affinity_warning(2, 1, true);
  EXPECT_NE(line.find("runtime.blas_threads is 2"), std::string::npos) << line;
  EXPECT_NE(line.find("on 1 core(s)"), std::string::npos) << line;
  EXPECT_NE(line.find("OMP_PROC_BIND=false"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);  // one line
  EXPECT_EQ(blas_affinity_warning(2, 2, true), "");
  EXPECT_EQ(blas_affinity_warning(2, 1, false), "");  // the OpenMP runtime places BLAS threads itself
  EXPECT_EQ(blas_affinity_warning(2, 0, true), "");   // affinity unknown
  EXPECT_GE(cores_allowed_to_this_thread(), 1);
}

}  // namespace
}  // namespace minimllm
