#include "prefetch/transfer_lp.h"

#include <CbcModel.hpp>
#include <ClpSimplex.hpp>
#include <CoinPackedMatrix.hpp>
#include <OsiClpSolverInterface.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace tierpool::prefetch {

Status TransferLpOptions::validate() const {
  if (max_windows < 2) return Status::InvalidArgument("the LP bound needs at least 2 windows");
  if (!(time_limit_s > 0)) return Status::InvalidArgument("the LP bound's time limit must be > 0");
  return Status::Ok();
}

namespace {

constexpr double kMiB = 1024.0 * 1024.0;  // the model's byte unit: keeps coefficients near 1

// Rows and columns as they are added; the matrix is built once at the end.
class LpBuilder {
 public:
  int Col(double lb, double ub, double cost = 0, bool integer = false) {
    collb_.push_back(lb);
    colub_.push_back(ub);
    obj_.push_back(cost);
    if (integer) integers_.push_back(static_cast<int>(obj_.size()) - 1);
    return static_cast<int>(obj_.size()) - 1;
  }
  int Row(double lb, double ub) {
    rowlb_.push_back(lb);
    rowub_.push_back(ub);
    return static_cast<int>(rowlb_.size()) - 1;
  }
  void Set(int row, int col, double v) {
    ri_.push_back(row);
    ci_.push_back(col);
    v_.push_back(v);
  }
  // A row over the given (column, coefficient) pairs.
  void Add(std::initializer_list<std::pair<int, double>> terms, double lb, double ub) {
    int r = Row(lb, ub);
    for (auto [c, v] : terms) Set(r, c, v);
  }

  void AddToUpper(int row, double delta) { rowub_[static_cast<std::size_t>(row)] += delta; }

  int columns() const { return static_cast<int>(obj_.size()); }
  int rows() const { return static_cast<int>(rowlb_.size()); }

  template <typename Solver>
  void LoadInto(Solver& solver) const {
    CoinPackedMatrix m(true, ri_.data(), ci_.data(), v_.data(),
                       static_cast<CoinBigIndex>(v_.size()));
    m.setDimensions(rows(), columns());
    solver.loadProblem(m, collb_.data(), colub_.data(), obj_.data(), rowlb_.data(), rowub_.data());
  }
  const std::vector<int>& integers() const { return integers_; }

 private:
  std::vector<double> collb_, colub_, obj_, rowlb_, rowub_, v_;
  std::vector<int> ri_, ci_, integers_;
};

// The boundary steps: all of them, or step 0, the steps with the most memory in use, and steps
// evenly spaced in compute time.
std::vector<std::uint32_t> Boundaries(const Lifetimes& lt, const std::vector<double>& cstart,
                                      std::uint64_t budget, std::uint32_t max_windows) {
  const std::uint32_t n = lt.steps();
  std::vector<std::uint32_t> out;
  if (n <= max_windows) {
    for (std::uint32_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  const auto& curve = lt.memory_curve();
  std::set<std::uint32_t> b = {0};
  std::vector<std::uint32_t> over;
  for (std::uint32_t p = 0; p < n; ++p) {
    if (curve[p] > budget) over.push_back(p);
  }
  std::stable_sort(over.begin(), over.end(), [&](auto x, auto y) { return curve[x] > curve[y]; });
  for (std::size_t i = 0; i < over.size() && b.size() < max_windows / 2; ++i) b.insert(over[i]);
  const std::size_t spread = max_windows - b.size();
  for (std::size_t j = 1; j <= spread; ++j) {
    double target = cstart[n] * static_cast<double>(j) / static_cast<double>(spread + 1);
    auto it = std::upper_bound(cstart.begin(), cstart.begin() + n, target);
    b.insert(static_cast<std::uint32_t>(it - cstart.begin()) - 1);
  }
  return {b.begin(), b.end()};
}

// The LP's optimum; infinity when infeasible, 0 when unsolved in time (0 is always a bound).
double SolveRelaxation(const LpBuilder& lp, double time_limit_s, bool* proven,
                       std::vector<double>* solution) {
  ClpSimplex model;
  model.setLogLevel(0);
  lp.LoadInto(model);
  model.setMaximumSeconds(time_limit_s);
  // CLP's automatic choice (presolve, then dual or primal as the problem looks) is 2-3x
  // faster here than the dual simplex alone.
  model.initialSolve();
  *proven = model.isProvenPrimalInfeasible() || model.isProvenOptimal();
  if (model.isProvenPrimalInfeasible()) return std::numeric_limits<double>::infinity();
  if (solution != nullptr && model.isProvenOptimal()) {
    solution->assign(model.primalColumnSolution(),
                     model.primalColumnSolution() + model.numberColumns());
  }
  return model.isProvenOptimal() ? model.objectiveValue() : 0.0;
}

// The integral optimum by branch and bound; where the search stops early, its best bound.
double SolveIntegral(const LpBuilder& lp, double time_limit_s, bool* proven) {
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  lp.LoadInto(solver);
  for (int c : lp.integers()) solver.setInteger(c);
  CbcModel model(solver);
  model.setLogLevel(0);
  model.setMaximumSeconds(time_limit_s);
  model.branchAndBound();
  *proven = model.isProvenInfeasible() || model.isProvenOptimal();
  if (model.isProvenInfeasible()) return std::numeric_limits<double>::infinity();
  double bound = model.isProvenOptimal() ? model.getObjValue() : model.getBestPossibleObjValue();
  return std::isfinite(bound) ? bound : 0.0;
}

// How one tensor meets the boundaries and windows; tensors with equal patterns are merged.
struct Pattern {
  int k0 = 0, k1 = -1;               // the boundaries it is live at: [k0, k1]
  bool defined_at_k0 = false;        // made by step a_k0 itself (no host copy there)
  int made_in_prev = -1;             // made inside window k0 - 1: the last step writing it there
  std::vector<char> touched;         // per boundary in [k0, k1]: that step uses or makes it
  std::vector<int> first_inner_use;  // per window in [k0, k1]: first use strictly inside, or -1
  std::vector<int> last_write;       // per window in [k0, k1]: last step making/updating it, or -1
  std::uint64_t bytes_each = 0;      // members are alike in size too (see the group's link cost)

  auto key() const {
    return std::tie(k0, k1, defined_at_k0, made_in_prev, touched, first_inner_use, last_write,
                    bytes_each);
  }
  bool operator<(const Pattern& o) const { return key() < o.key(); }
};

struct Group {
  double mib = 0;           // bytes of all members
  std::uint32_t count = 0;  // members
  std::vector<std::uint32_t> members;
  std::vector<int> x;  // its x column per boundary in [k0, k1]
};

}  // namespace

Result<TransferLpBound> TransferLpStallBound(const Schedule& s, const Lifetimes& lt,
                                             const DeviceProfile& d, std::uint64_t budget,
                                             const TransferLpOptions& options) {
  if (Status st = options.validate(); !st.ok()) return st;
  TransferLpBound out;
  if (lt.steps() == 0 || lt.peak_bytes() <= budget) {
    out.proven = true;
    return out;
  }
  // Below what one step touches at once no policy keeps the budget; the relaxation, which
  // keeps memory at its boundaries only, could find a point there.
  if (budget < lt.step_floor_bytes()) {
    out.proven = true;
    out.feasible = false;
    out.stall_us = std::numeric_limits<double>::infinity();
    return out;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::uint32_t n = lt.steps();
  const auto& curve = lt.memory_curve();
  const std::vector<double> cstart = ComputeStarts(s);  // compute start of each step, no stall
  const std::vector<std::uint32_t> a = Boundaries(lt, cstart, budget, options.max_windows);
  const int K = static_cast<int>(a.size());
  out.windows = static_cast<std::uint32_t>(K);
  auto window_of = [&](std::uint32_t step) {
    return static_cast<int>(std::upper_bound(a.begin(), a.end(), step) - a.begin()) - 1;
  };
  std::vector<char> over(static_cast<std::size_t>(K), 0);
  for (int k = 0; k < K; ++k) over[static_cast<std::size_t>(k)] = curve[a[k]] > budget;

  // Patterns. A tensor never live at a boundary over the budget can stay in hbm throughout at
  // no cost, so it is left out.
  std::map<Pattern, Group> groups;
  for (std::uint32_t t = 0; t < static_cast<std::uint32_t>(s.tensors_size()); ++t) {
    const auto& ts = s.tensors(static_cast<int>(t));
    Pattern p;
    const bool persistent = lt.persistent(t);
    const std::uint32_t def = persistent ? 0 : static_cast<std::uint32_t>(lt.def(t));
    p.k0 = persistent ? 0 : static_cast<int>(std::lower_bound(a.begin(), a.end(), def) - a.begin());
    p.k1 = persistent ? K - 1 : window_of(lt.last_touch(t));
    if (p.k0 > p.k1) continue;  // made and dead inside one window
    bool at_risk = false;
    for (int k = p.k0; k <= p.k1; ++k) at_risk |= over[static_cast<std::size_t>(k)] != 0;
    if (!at_risk) continue;
    p.defined_at_k0 = !persistent && a[static_cast<std::size_t>(p.k0)] == def;
    const auto span = static_cast<std::size_t>(p.k1 - p.k0 + 1);
    p.touched.assign(span, 0);
    p.first_inner_use.assign(span, -1);
    p.last_write.assign(span, -1);
    auto write = [&](std::uint32_t step) {
      int k = window_of(step);
      if (k == p.k0 - 1) {
        p.made_in_prev = std::max(p.made_in_prev, static_cast<int>(step));
      } else if (k >= p.k0) {
        auto& w = p.last_write[static_cast<std::size_t>(k - p.k0)];
        w = std::max(w, static_cast<int>(step));
      }
    };
    if (!persistent) write(def);
    if (p.defined_at_k0) p.touched[0] = 1;
    const auto& uses = lt.uses(t);
    for (auto u : uses) {
      int k = window_of(u);
      if (k < p.k0) continue;  // a use in the window it was made in, before its first boundary
      auto j = static_cast<std::size_t>(k - p.k0);
      if (a[static_cast<std::size_t>(k)] == u) {
        p.touched[j] = 1;
      } else if (p.first_inner_use[j] < 0) {
        p.first_inner_use[j] = static_cast<int>(u);
      }
    }
    // Updates count only where the step also uses the tensor (the replay applies an update to
    // the bytes in hbm).
    for (auto u : ts.update_steps()) {
      if (std::binary_search(uses.begin(), uses.end(), u)) write(u);
    }
    p.bytes_each = ts.size_bytes();
    Group& g = groups[p];
    if (options.residency) g.members.push_back(t);
    g.mib += static_cast<double>(ts.size_bytes()) / kMiB;
    ++g.count;
  }
  out.tensor_groups = static_cast<std::uint32_t>(groups.size());

  LpBuilder lp;
  const double inf = COIN_DBL_MAX;
  const double h2d = d.h2d_gbps * 1e3 / kMiB, d2h = d.d2h_gbps * 1e3 / kMiB;  // MiB per us
  auto window_end = [&](int k) {
    return k + 1 < K ? cstart[a[static_cast<std::size_t>(k) + 1]] : cstart[n];
  };
  std::vector<int> stall(static_cast<std::size_t>(K)), h2d_row(static_cast<std::size_t>(K)),
      d2h_row(static_cast<std::size_t>(K)), mem_row(static_cast<std::size_t>(K), -1);
  const double budget_mib = static_cast<double>(budget) / kMiB;
  for (int k = 0; k < K; ++k) {
    const auto uk = static_cast<std::size_t>(k);
    const double compute = window_end(k) - cstart[a[uk]];
    stall[uk] = lp.Col(0, inf, 1.0);
    // bytes moved - rate * S_k <= rate * compute_k
    h2d_row[uk] = lp.Row(-inf, h2d * compute);
    lp.Set(h2d_row[uk], stall[uk], -h2d);
    d2h_row[uk] = lp.Row(-inf, d2h * compute);
    lp.Set(d2h_row[uk], stall[uk], -d2h);
    if (over[uk]) mem_row[uk] = lp.Row(-inf, budget_mib);
  }
  // Inside a window, time is finer than the boundaries: what is written at step w can leave
  // only after w's compute, and what a step p inside uses must arrive before p starts. One row
  // per window and such step, over every tensor written at or after w (needed by p or
  // earlier): bytes <= rate * (the window's compute after w, or before p, + S_k).
  std::map<std::pair<int, int>, int> after_write, before_use;
  auto nested_row = [&](std::map<std::pair<int, int>, int>& rows, int k, int step, bool after) {
    auto [it, added] = rows.try_emplace({k, step}, -1);
    if (added) {
      const double rate = after ? d2h : h2d;
      const double compute =
          after ? window_end(k) - cstart[static_cast<std::size_t>(step) + 1]
                : cstart[static_cast<std::size_t>(step)] - cstart[a[static_cast<std::size_t>(k)]];
      it->second = lp.Row(-inf, rate * compute);
      lp.Set(it->second, stall[static_cast<std::size_t>(k)], -rate);
    }
    return it->second;
  };
  for (const auto& [p, g] : groups) {
    for (std::size_t j = 0; j < p.last_write.size(); ++j) {
      if (p.last_write[j] >= 0)
        nested_row(after_write, p.k0 + static_cast<int>(j), p.last_write[j], true);
      if (p.first_inner_use[j] >= 0)
        nested_row(before_use, p.k0 + static_cast<int>(j), p.first_inner_use[j], false);
    }
    if (p.made_in_prev >= 0) nested_row(after_write, p.k0 - 1, p.made_in_prev, true);
  }
  // Each tensor joins the rows of its window at or before its write (at or after its use).
  auto rows_from = [](const std::map<std::pair<int, int>, int>& rows, int k, int step,
                      bool at_or_before) {
    std::vector<int> out_rows;
    for (auto it = rows.lower_bound({k, -1}); it != rows.end() && it->first.first == k; ++it) {
      if (at_or_before ? it->first.second <= step : it->first.second >= step)
        out_rows.push_back(it->second);
    }
    return out_rows;
  };

  // On a link each transfer costs its bytes plus the link's latency (the replay counts the
  // latency as bytes at the link's rate, taken with the transfer's own): a group's link
  // coefficient is its members' bytes and latencies, and x, h, g, o count what has crossed of
  // that, so a partly moved tensor pays its share of the latency.
  const double latency_in = d.link_latency_us * h2d, latency_out = d.link_latency_us * d2h;
  for (auto& [pattern, g] : groups) {
    // A reference of its own: lambdas below use it, and clang before 16 cannot capture a
    // structured binding.
    const auto& p = pattern;
    const double cost_in = g.mib + g.count * latency_in, cost_out = g.mib + g.count * latency_out;
    const auto span = static_cast<std::size_t>(p.k1 - p.k0 + 1);
    // out_col's slot 0 is window k0 - 1, where a tensor made inside it may first be copied out.
    std::vector<int> x(span), h(span), in(span, -1), out_col(span + 1, -1);
    for (std::size_t j = 0; j < span; ++j) {
      const int k = p.k0 + static_cast<int>(j);
      x[j] = lp.Col(p.touched[j] ? 1.0 : 0.0, 1.0);
      if (options.residency) g.x.push_back(x[j]);
      h[j] = lp.Col(0, (j == 0 && p.defined_at_k0) ? 0.0 : 1.0);
      lp.Add({{x[j], 1.0}, {h[j], 1.0}}, 1.0, inf);
      if (over[static_cast<std::size_t>(k)]) {
        if (options.integral) {
          // Allocated members (an integer count): at least the bytes in hbm, and what the
          // budget counts.
          int z = lp.Col(0, g.count, 0, true);
          lp.Add({{x[j], static_cast<double>(g.count)}, {z, -1.0}}, -inf, 0);
          lp.Set(mem_row[static_cast<std::size_t>(k)], z, g.mib / g.count);
        } else {
          lp.Set(mem_row[static_cast<std::size_t>(k)], x[j], g.mib);
        }
      }
    }
    auto link_in = [&](std::size_t j) {
      if (in[j] < 0) {
        in[j] = lp.Col(0, 1.0);
        lp.Set(h2d_row[static_cast<std::size_t>(p.k0) + j], in[j], cost_in);
      }
      return in[j];
    };
    // o in a window that writes the tensor counts only the bytes copied after its last write
    // there (the only ones that leave a current host copy).
    auto link_out = [&](int k, int last_write) {
      auto j = static_cast<std::size_t>(k - p.k0 + 1);
      if (out_col[j] < 0) {
        out_col[j] = lp.Col(0, 1.0);
        lp.Set(d2h_row[static_cast<std::size_t>(k)], out_col[j], cost_out);
        if (last_write >= 0) {
          for (int r : rows_from(after_write, k, last_write, true)) lp.Set(r, out_col[j], cost_out);
        }
      }
      return out_col[j];
    };
    if (p.made_in_prev >= 0)
      lp.Add({{h[0], 1.0}, {link_out(p.k0 - 1, p.made_in_prev), -1.0}}, -inf, 0);
    for (std::size_t j = 0; j < span; ++j) {
      const int k = p.k0 + static_cast<int>(j);
      if (p.first_inner_use[j] >= 0) {
        lp.Add({{x[j], 1.0}, {link_in(j), 1.0}}, 1.0, inf);
        // (1 - x) of it arrives before the use: -bytes * x <= ... - bytes.
        for (int r : rows_from(before_use, k, p.first_inner_use[j], false)) {
          lp.Set(r, x[j], -cost_in);
          lp.AddToUpper(r, -cost_in);
        }
      }
      if (j + 1 == span) break;
      lp.Add({{x[j + 1], 1.0}, {x[j], -1.0}, {link_in(j), -1.0}}, -inf, 0);
      if (p.last_write[j] >= 0) {
        lp.Add({{h[j + 1], 1.0}, {link_out(k, p.last_write[j]), -1.0}}, -inf, 0);
      } else {
        lp.Add({{h[j + 1], 1.0}, {h[j], -1.0}, {link_out(k, -1), -1.0}}, -inf, 0);
      }
    }
  }
  out.columns = lp.columns();
  out.rows = lp.rows();

  // Infinity: no point is feasible. Else the optimum, or an unfinished search's best bound.
  std::vector<double> solution;
  const double objective = options.integral
                               ? SolveIntegral(lp, options.time_limit_s, &out.proven)
                               : SolveRelaxation(lp, options.time_limit_s, &out.proven,
                                                 options.residency ? &solution : nullptr);
  out.feasible = !std::isinf(objective);
  if (!solution.empty()) {
    out.residency.boundaries = a;
    out.residency.in_hbm.resize(static_cast<std::size_t>(s.tensors_size()));
    for (const auto& [p, g] : groups) {
      std::vector<float> v(static_cast<std::size_t>(K), 1.0f);
      for (std::size_t j = 0; j < g.x.size(); ++j) {
        v[static_cast<std::size_t>(p.k0) + j] =
            static_cast<float>(solution[static_cast<std::size_t>(g.x[j])]);
      }
      for (auto t : g.members) out.residency.in_hbm[t] = v;
    }
  }
  // The solvers' tolerances: shave what rounding could have added.
  out.stall_us = std::isfinite(objective)
                     ? std::max(0.0, objective - 1e-6 * std::fabs(objective) - 1e-3)
                     : objective;
  out.solve_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace tierpool::prefetch
