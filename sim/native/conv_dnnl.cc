// Stride-1 "SAME" 2-D convolutions for float32 on CPU, computed by oneDNN and called from XLA
// through its FFI (the typed API of xla/ffi/api/ffi.h, shipped with jaxlib).
//
// Three handlers, one per primitive of sim/native_conv.py:
//   delaylab_conv          y [N,H,W,O]  = conv(x [N,H,W,C], w [KH,KW,C,O])
//   delaylab_conv_bwd_data dx [N,H,W,C] = conv's transpose in x, applied to g [N,H,W,O]
//   delaylab_conv_bwd_w    dw [KH,KW,C,O] = conv's transpose in w, from x and g
// Layouts are JAX's (NHWC activations, HWIO kernels). oneDNN chooses its own (blocked) layouts
// ("any"); the arguments are reordered in and the result out, which measured faster on this
// project's 2-core AVX-512 machine than running on NHWC directly (benchmarks/RESULTS.md).
// Padding is "SAME": (K - 1) / 2 before, the rest after, as in lax's "SAME" for stride 1.
//
// Primitives, reorders and the blocked buffers are cached per calling thread and shape, so
// concurrent calls from XLA's threads never share a buffer.
#include <array>
#include <cstdint>
#include <map>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using dnnl::memory;
using tag = dnnl::memory::format_tag;

namespace {

enum Kind : int64_t { kForward = 0, kBackwardData = 1, kBackwardWeights = 2 };

dnnl::engine& Engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// One operand or result: the caller's layout, and where it differs, oneDNN's chosen layout, a
// buffer in it and the reorder between the two.
struct Operand {
  memory::desc user;
  memory internal;
  dnnl::reorder reorder;  // user -> internal for inputs, internal -> user for the result
  bool reordered = false;
  int arg = 0;

  void Init(const memory::desc& user_md, const memory::desc& chosen, int dnnl_arg, bool is_input) {
    user = user_md;
    arg = dnnl_arg;
    reordered = !(chosen == user_md);
    if (reordered) {
      internal = memory(chosen, Engine());
      reorder = is_input ? dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), user_md, Engine(), chosen))
                         : dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), chosen, Engine(), user_md));
    }
  }
};

struct Entry {
  dnnl::primitive prim;
  Operand a, b, out;
};

using Key = std::array<int64_t, 8>;  // kind, N, H, W, C, O, KH, KW

Entry MakeEntry(const Key& k) {
  const int64_t n = k[1], h = k[2], w = k[3], c = k[4], o = k[5], kh = k[6], kw = k[7];
  const memory::dims src{n, c, h, w}, wei{o, c, kh, kw}, dst{n, o, h, w};
  const memory::dims strides{1, 1}, pad_l{(kh - 1) / 2, (kw - 1) / 2},
      pad_r{kh - 1 - (kh - 1) / 2, kw - 1 - (kw - 1) / 2};
  const auto f32 = memory::data_type::f32;
  const memory::desc src_u(src, f32, tag::nhwc), wei_u(wei, f32, tag::hwio), dst_u(dst, f32, tag::nhwc);
  // Activations stay NHWC (oneDNN has direct kernels for it); kernels go to its blocked layout.
  const memory::desc src_a = src_u, wei_a(wei, f32, tag::any), dst_a = dst_u;
  auto& eng = Engine();
  const auto direct = dnnl::algorithm::convolution_direct;
  // oneDNN 3 builds primitive descriptors from the memory descriptors directly; oneDNN 2 (Debian's
  // 2.6) from an operation descriptor, which 3 removed.
#if DNNL_VERSION_MAJOR >= 3
  auto fwd_pd = dnnl::convolution_forward::primitive_desc(eng, dnnl::prop_kind::forward_training, direct, src_a,
                                                          wei_a, dst_a, strides, pad_l, pad_r);
#else
  auto fwd_pd = dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, src_a, wei_a, dst_a, strides,
                                      pad_l, pad_r),
      eng);
#endif
  Entry e;
  if (k[0] == kForward) {
    e.prim = dnnl::convolution_forward(fwd_pd);
    e.a.Init(src_u, fwd_pd.src_desc(), DNNL_ARG_SRC, true);
    e.b.Init(wei_u, fwd_pd.weights_desc(), DNNL_ARG_WEIGHTS, true);
    e.out.Init(dst_u, fwd_pd.dst_desc(), DNNL_ARG_DST, false);
  } else if (k[0] == kBackwardData) {
#if DNNL_VERSION_MAJOR >= 3
    auto pd = dnnl::convolution_backward_data::primitive_desc(eng, direct, src_a, wei_a, dst_a, strides, pad_l,
                                                              pad_r, fwd_pd);
#else
    auto pd = dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(direct, src_a, wei_a, dst_a, strides, pad_l, pad_r), eng, fwd_pd);
#endif
    e.prim = dnnl::convolution_backward_data(pd);
    e.a.Init(dst_u, pd.diff_dst_desc(), DNNL_ARG_DIFF_DST, true);
    e.b.Init(wei_u, pd.weights_desc(), DNNL_ARG_WEIGHTS, true);
    e.out.Init(src_u, pd.diff_src_desc(), DNNL_ARG_DIFF_SRC, false);
  } else {
#if DNNL_VERSION_MAJOR >= 3
    auto pd = dnnl::convolution_backward_weights::primitive_desc(eng, direct, src_a, wei_a, dst_a, strides, pad_l,
                                                                 pad_r, fwd_pd);
#else
    auto pd = dnnl::convolution_backward_weights::primitive_desc(
        dnnl::convolution_backward_weights::desc(direct, src_a, wei_a, dst_a, strides, pad_l, pad_r), eng, fwd_pd);
#endif
    e.prim = dnnl::convolution_backward_weights(pd);
    e.a.Init(src_u, pd.src_desc(), DNNL_ARG_SRC, true);
    e.b.Init(dst_u, pd.diff_dst_desc(), DNNL_ARG_DIFF_DST, true);
    e.out.Init(wei_u, pd.diff_weights_desc(), DNNL_ARG_DIFF_WEIGHTS, false);
  }
  return e;
}

void Run(const Key& key, const float* a, const float* b, float* out) {
  thread_local std::map<Key, Entry> cache;
  thread_local dnnl::stream stream(Engine());
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, MakeEntry(key)).first;
  Entry& e = it->second;
  auto& eng = Engine();
  memory a_u(e.a.user, eng, const_cast<float*>(a)), b_u(e.b.user, eng, const_cast<float*>(b)),
      out_u(e.out.user, eng, out);
  for (auto* op : {&e.a, &e.b}) {
    memory& user = op == &e.a ? a_u : b_u;
    if (op->reordered) op->reorder.execute(stream, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, op->internal}});
  }
  e.prim.execute(stream, {{e.a.arg, e.a.reordered ? e.a.internal : a_u},
                          {e.b.arg, e.b.reordered ? e.b.internal : b_u},
                          {e.out.arg, e.out.reordered ? e.out.internal : out_u}});
  if (e.out.reordered) e.out.reorder.execute(stream, {{DNNL_ARG_FROM, e.out.internal}, {DNNL_ARG_TO, out_u}});
  stream.wait();
}

// x: [N,H,W,C]; w: [KH,KW,C,O]; activation a/result shapes are checked against them.
ffi::Error Check(bool ok, const char* what) {
  return ok ? ffi::Error::Success() : ffi::Error::InvalidArgument(std::string("delaylab conv: ") + what);
}

template <typename F>
ffi::Error Guard(F f) {
  try {
    f();
    return ffi::Error::Success();
  } catch (const dnnl::error& err) {
    return ffi::Error::Internal(std::string("delaylab conv (oneDNN): ") + err.what());
  }
}

// The three handlers' common part: check that the activations x [N,H,W,C], the kernel w
// [KH,KW,C,O] and the output-side tensor g [N,H,W,O] agree, then run ``kind`` on (a, b) -> out.
template <typename Dims>
ffi::Error Launch(Kind kind, const Dims& xd, const Dims& wd, const Dims& gd, const char* shapes, const float* a,
                  const float* b, float* out) {
  if (auto e = Check(xd.size() == 4 && wd.size() == 4 && gd.size() == 4 && wd[2] == xd[3] && gd[0] == xd[0] &&
                         gd[1] == xd[1] && gd[2] == xd[2] && gd[3] == wd[3],
                     shapes);
      e.failure())
    return e;
  return Guard([&] { Run({kind, xd[0], xd[1], xd[2], xd[3], wd[3], wd[0], wd[1]}, a, b, out); });
}

ffi::Error ConvImpl(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w, ffi::ResultBuffer<ffi::F32> y) {
  return Launch(kForward, x.dimensions(), w.dimensions(), y->dimensions(),
                "shapes must be x [N,H,W,C], w [KH,KW,C,O], y [N,H,W,O]", x.typed_data(), w.typed_data(),
                y->typed_data());
}

ffi::Error ConvBackwardDataImpl(ffi::Buffer<ffi::F32> g, ffi::Buffer<ffi::F32> w, ffi::ResultBuffer<ffi::F32> dx) {
  return Launch(kBackwardData, dx->dimensions(), w.dimensions(), g.dimensions(),
                "shapes must be g [N,H,W,O], w [KH,KW,C,O], dx [N,H,W,C]", g.typed_data(), w.typed_data(),
                dx->typed_data());
}

ffi::Error ConvBackwardWeightsImpl(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> g,
                                   ffi::ResultBuffer<ffi::F32> dw) {
  return Launch(kBackwardWeights, x.dimensions(), dw->dimensions(), g.dimensions(),
                "shapes must be x [N,H,W,C], g [N,H,W,O], dw [KH,KW,C,O]", x.typed_data(), g.typed_data(),
                dw->typed_data());
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DelaylabConv, ConvImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(DelaylabConvBackwardData, ConvBackwardDataImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(DelaylabConvBackwardWeights, ConvBackwardWeightsImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
