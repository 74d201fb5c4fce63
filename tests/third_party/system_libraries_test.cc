// Each system library that third_party/BUILD.bazel wraps links and does real work: a wrapper
// that names the wrong library, or a Debian package that changed, fails here first, with the
// library's name, rather than deep inside a feature that uses it.
#include <cblas.h>
#include <curl/curl.h>
#include <gloo/rendezvous/hash_store.h>
#include <ucp/api/ucp.h>
#include <zlib.h>

#include <dnnl.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

TEST(SystemLibrariesTest, OpenBlasMultipliesMatrices) {
  const float a[4] = {1, 2, 3, 4};  // row-major [[1, 2], [3, 4]]
  const float b[4] = {5, 6, 7, 8};
  float c[4] = {0, 0, 0, 0};
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  EXPECT_EQ(std::vector<float>(c, c + 4), (std::vector<float>{19, 22, 43, 50}));
}

TEST(SystemLibrariesTest, OneDnnRunsAMatmulPrimitive) {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  dnnl::memory::desc a_md({2, 3}, dt::f32, tag::ab), b_md({3, 2}, dt::f32, tag::ab),
      c_md({2, 2}, dt::f32, tag::ab);
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 0, 1, 1, 1}, c(4, 0);
  dnnl::memory a_mem(a_md, engine, a.data()), b_mem(b_md, engine, b.data()),
      c_mem(c_md, engine, c.data());
  dnnl::matmul matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), engine));
  matmul.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  stream.wait();
  EXPECT_EQ(c, (std::vector<float>{4, 5, 10, 11}));
}

TEST(SystemLibrariesTest, ZlibRoundTrips) {
  const std::string text(10000, 'p');
  uLongf packed_size = compressBound(text.size());
  std::vector<Bytef> packed(packed_size);
  ASSERT_EQ(compress(packed.data(), &packed_size, reinterpret_cast<const Bytef*>(text.data()),
                     text.size()),
            Z_OK);
  EXPECT_LT(packed_size, 200u);
  std::string back(text.size(), '\0');
  uLongf back_size = back.size();
  ASSERT_EQ(
      uncompress(reinterpret_cast<Bytef*>(back.data()), &back_size, packed.data(), packed_size),
      Z_OK);
  EXPECT_EQ(back, text);
}

TEST(SystemLibrariesTest, GlooStoreKeepsValues) {
  gloo::rendezvous::HashStore store;
  store.set("key", std::vector<char>{'v', '1'});
  EXPECT_EQ(store.get("key"), (std::vector<char>{'v', '1'}));
}

TEST(SystemLibrariesTest, UcxInitializesAContext) {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  EXPECT_GE(major * 100 + minor, 113u) << "Debian 12 ships UCX 1.13";
  ucp_config_t* config = nullptr;
  ASSERT_EQ(ucp_config_read(nullptr, nullptr, &config), UCS_OK);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_context_h context = nullptr;
  EXPECT_EQ(ucp_init(&params, config, &context), UCS_OK);
  ucp_config_release(config);
  if (context != nullptr) ucp_cleanup(context);
}

TEST(SystemLibrariesTest, CurlReportsItsVersion) {
  const curl_version_info_data* info = curl_version_info(CURLVERSION_NOW);
  ASSERT_NE(info, nullptr);
  EXPECT_GE(info->version_num, 0x075800u) << "Debian 12 ships curl 7.88";
}

}  // namespace
