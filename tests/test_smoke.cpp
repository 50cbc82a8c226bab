#include <doctest/doctest.h>
#include <heed/heed.h>
using namespace heed;
TEST_CASE("smoke") {
  Tensor a = tensor({{1, 2}, {3, 4}}).requires_grad_();
  Tensor b = tensor({{5, 6}, {7, 8}});
  Tensor c = matmul(a, b);
  CHECK(c.at<float>({0, 0}) == 19.0f);
  c.sum().backward();
  CHECK(a.grad().at<float>({0, 0}) == 11.0f);
}
