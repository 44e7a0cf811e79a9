// Unit tests of Slurm's compressed lists: see Note [Slurm host lists] in common/slurm/hostlist.h.
#include <gtest/gtest.h>

#include "common/basics/errors.h"
#include "common/slurm/hostlist.h"

using V = std::vector<std::string>;
using ddp::expand_hostlist;
using ddp::expand_tasks_per_node;

TEST(Hostlist, PlainNamesAndCommaLists) {
  EXPECT_EQ(expand_hostlist("node1"), V({"node1"}));
  EXPECT_EQ(expand_hostlist("a,b,c"), V({"a", "b", "c"}));
  EXPECT_EQ(expand_hostlist("login3.cluster.org"), V({"login3.cluster.org"}));
}

TEST(Hostlist, RangesKeepTheirZeroPadding) {
  EXPECT_EQ(expand_hostlist("node[1-3]"), V({"node1", "node2", "node3"}));
  EXPECT_EQ(expand_hostlist("gpu[01-04,07]"), V({"gpu01", "gpu02", "gpu03", "gpu04", "gpu07"}));
  EXPECT_EQ(expand_hostlist("gpu[08-11]"), V({"gpu08", "gpu09", "gpu10", "gpu11"}));
  EXPECT_EQ(expand_hostlist("n[098-101]"), V({"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_hostlist("n[9-10]"), V({"n9", "n10"}));  // no leading zero: no padding
  EXPECT_EQ(expand_hostlist("n[5]"), V({"n5"}));
}

TEST(Hostlist, SeveralPrefixesSuffixesAndGroups) {
  EXPECT_EQ(expand_hostlist("gpu[01-02],cpu[7,9],login"), V({"gpu01", "gpu02", "cpu7", "cpu9", "login"}));
  EXPECT_EQ(expand_hostlist("a[1-2]-ib,b"), V({"a1-ib", "a2-ib", "b"}));
  // Two bracket groups in one name multiply, the first varying slowest.
  EXPECT_EQ(expand_hostlist("r[1-2]n[01-02]"), V({"r1n01", "r1n02", "r2n01", "r2n02"}));
  EXPECT_EQ(expand_hostlist("127.0.0.[1-3]"), V({"127.0.0.1", "127.0.0.2", "127.0.0.3"}));
  EXPECT_EQ(expand_hostlist("node[1-1000]").size(), 1000u);
}

TEST(Hostlist, MalformedListsAreRefusedWithTheReason) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "it is empty"},
      {"node[1-2", "'[' without ']'"},
      {"node1-2]", "']' without '['"},
      {"node[1-[2]]", "nested '['"},
      {"node[]", "empty brackets"},
      {"node[3-1]", "the range '3-1' goes down"},
      {"node[a-b]", "'a-b' is not a number or a range a-b"},
      {"node[1-2-3]", "'1-2-3' is not a number or a range a-b"},
      {"node[1-]", "the range '1-' has an empty bound"},
      {"node[1,,2]", "the range '' has an empty bound"},
      {"a,,b", "an empty host name"},
      {"a,", "an empty host name"},
      {"node 1", "it contains a space"},
      {"n[0-99999999]", "more than 1000000 hosts"},
      {"n[1234567890]", "the number '1234567890' is too long"},
  };
  for (const auto& [list, why] : cases) {
    try {
      expand_hostlist(list);
      ADD_FAILURE() << "'" << list << "' was accepted";
    } catch (const ddp::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("malformed Slurm node list '" + list + "': " + why), std::string::npos)
          << "'" << list << "': " << e.what();
    }
  }
}

TEST(Hostlist, TasksPerNode) {
  EXPECT_EQ(expand_tasks_per_node("4"), std::vector<int>({4}));
  EXPECT_EQ(expand_tasks_per_node("2(x3),1"), std::vector<int>({2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("1,2(x2),3"), std::vector<int>({1, 2, 2, 3}));
  for (const std::string bad : {"", "2(x3", "(x3)", "2(3)", "2(x)", "0", "2,", "two", "2(x0)", "2(x3)4"}) {
    EXPECT_THROW(expand_tasks_per_node(bad), ddp::UsageError) << "'" << bad << "' was accepted";
  }
}
