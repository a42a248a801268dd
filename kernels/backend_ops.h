// The functions a backend defines: one per op of kernels/ops.h, with the same name, signature
// and contract. kernels/cpu/cpu_ops.h includes this list inside namespace kernels::cpu and
// kernels/cuda/cuda_ops.h inside kernels::cuda, so the two backends cannot drift apart.
// kernels/ops.cpp routes each call to one of them once the operands share a device; the backend
// checks shapes and dtypes, except where a group below says the router already has.
// Included inside a namespace, once per backend: hence no #pragma once and no #include (the
// including header brings core/tensor.h and kernels/ops.h first).

// conv2d (cpu/conv2d.cpp and its tap-crop and flipped-backward paths; cuda/conv2d.cu)
void conv2d_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const Conv2dParams& p);
void conv2d_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Conv2dParams& p);

// linear
void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias);
void linear_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                     const Tensor& w);

// batchnorm (per-channel tensors may be float32 or float64 independently of x)
void batchnorm_channel_sums(Tensor& sum, Tensor& sum_sq, const Tensor& x);
void batchnorm_apply(Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                     const Tensor& gamma, const Tensor& beta);
void batchnorm_forward_train(Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                             Tensor& running_mean, Tensor& running_var, const Tensor& x,
                             const Tensor& gamma, const Tensor& beta, double momentum, double eps);
void batchnorm_forward_eval(Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& running_mean, const Tensor& running_var, double eps);
void batchnorm_backward_reduce(Tensor& sum_dy, Tensor& sum_dy_xhat, const Tensor& dy,
                               const Tensor& x, const Tensor& mean, const Tensor& invstd);
void batchnorm_backward_apply(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& invstd, const Tensor& gamma, const Tensor& sum_dy,
                              const Tensor& sum_dy_xhat, double count);
void batchnorm_backward(Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor& dy,
                        const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                        const Tensor& save_invstd);
// batch norm + relu (+ residual): one pass on the CPU (cpu/batchnorm.cpp), the ops above one
// after another on CUDA (cuda/batchnorm_relu.cu)
void batchnorm_relu_forward_train(Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                                  Tensor& running_mean, Tensor& running_var, const Tensor& x,
                                  const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                                  double momentum, double eps);
void batchnorm_relu_forward_eval(Tensor& y, const Tensor& x, const Tensor& residual,
                                 const Tensor& gamma, const Tensor& beta,
                                 const Tensor& running_mean, const Tensor& running_var, double eps);
void batchnorm_relu_backward(Tensor& dx, Tensor& dresidual, Tensor& dgamma, Tensor& dbeta,
                             const Tensor& dy, const Tensor& y, const Tensor& x,
                             const Tensor& gamma, const Tensor& save_mean,
                             const Tensor& save_invstd);

// elementwise (the router has checked counts, dtypes and devices: check_same; and the counter)
void relu_forward(Tensor& y, const Tensor& x);
void relu_backward(Tensor& dx, const Tensor& dy, const Tensor& y);
void add(Tensor& y, const Tensor& a, const Tensor& b);
void add_relu_forward(Tensor& y, const Tensor& a, const Tensor& b);
void scale_(Tensor& a, double alpha);
void increment_(Tensor& counter);

// pool
void maxpool2d_forward(Tensor& y, Tensor& indices, const Tensor& x, const Pool2dParams& p);
void maxpool2d_backward(Tensor& dx, const Tensor& dy, const Tensor& indices);
void global_avgpool_forward(Tensor& y, const Tensor& x);
void global_avgpool_backward(Tensor& dx, const Tensor& dy);

// loss (loss is a one-element tensor on the logits' device)
void cross_entropy_forward(Tensor& loss, Tensor& log_probs, const Tensor& logits,
                           const Tensor& labels);
void cross_entropy_backward(Tensor& dlogits, const Tensor& log_probs, const Tensor& labels,
                            double dloss);
int64_t count_correct(const Tensor& logits, const Tensor& labels);

// cast (the router has checked that both are defined with equal element counts)
void cast(Tensor& dst, const Tensor& src);
int64_t count_nonfinite(const Tensor& t);

// sgd (the router has checked every operand)
void sgd_step(Tensor& param, Tensor& momentum_buf, const Tensor& grad, const SgdParams& p,
              bool first_step);
