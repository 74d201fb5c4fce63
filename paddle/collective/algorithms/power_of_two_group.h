// The power-of-two group that recursive doubling and halving-doubling run in, and how the other
// ranks are folded into it.
//
// With n ranks, p2 the largest power of two <= n and rem = n - p2: the first 2*rem ranks pair up
// (0,1), (2,3), ...; in each pair the even rank hands its data to the odd one before the main
// phase ("fold") and receives the result from it afterwards ("unfold"), sitting the main phase
// out. The odd rank of pair k becomes group member k; ranks >= 2*rem become members rank - rem.
// For n = 6: p2 = 4, rem = 2, ranks 1, 3, 4, 5 are members 0..3; ranks 0 and 2 fold into 1 and 3.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_POWER_OF_TWO_GROUP_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_POWER_OF_TWO_GROUP_H_

namespace paddle {

class PowerOfTwoGroup {
 public:
  PowerOfTwoGroup(int rank, int world_size) : rank_(rank) {
    p2_ = 1;
    while (p2_ * 2 <= world_size) p2_ *= 2;
    rem_ = world_size - p2_;
  }

  // Members of the group: p2, a power of two.
  int size() const { return p2_; }
  // log2(size()): the rounds of a recursive-doubling or recursive-halving phase.
  int rounds() const {
    int k = 0;
    while ((1 << k) < p2_) ++k;
    return k;
  }
  // True for the even rank of a folded pair, which sits the main phase out.
  bool folded_out() const { return rank_ < 2 * rem_ && rank_ % 2 == 0; }
  // True for the odd rank of a folded pair, which takes its partner's data in.
  bool folds_in() const { return rank_ < 2 * rem_ && rank_ % 2 == 1; }
  // The partner in the fold: rank+1 for folded_out(), rank-1 for folds_in().
  int fold_partner() const { return rank_ % 2 == 0 ? rank_ + 1 : rank_ - 1; }
  // This rank's member index; -1 if folded_out().
  int member() const {
    if (folded_out()) return -1;
    return rank_ < 2 * rem_ ? rank_ / 2 : rank_ - rem_;
  }
  // The rank of member `m`.
  int RankOf(int m) const { return m < rem_ ? 2 * m + 1 : m + rem_; }

 private:
  int rank_;
  int p2_;
  int rem_;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_POWER_OF_TWO_GROUP_H_
