// The job files `ddprun status` finds local jobs by: private to the user,
// gone with their process, and nothing another user plants is trusted.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "launcher/job_file.h"
#include "support/job_helpers.h"

namespace ddprun {
namespace {

namespace fs = std::filesystem;

struct Dir {
  Dir() : root(ddptest::temp_path("jobfile", ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    fs::create_directories(root);
    chmod(root.c_str(), 0700);
  }
  ~Dir() { fs::remove_all(root); }
  fs::path root;
  std::string dir() const { return (root / "ddprun").string(); }
};

JobFileEntry me(const std::string& run_id = "job-a") {
  return JobFileEntry{run_id, "127.0.0.1:1234", RendezvousAuth{"tok-0123456789abcdef", {}},
                      static_cast<long>(getpid()), process_start_time(getpid()), own_netns()};
}

// A job file as a ddprun with pid `pid` would write it, written by hand.
void plant(const std::string& path, long pid, mode_t mode) {
  std::ofstream(path) << "run_id=planted\nendpoint=10.0.0.66:1\ntoken=evil-token-0123456789\npid="
                      << pid << "\nstart_time=" << process_start_time(pid) << "\n";
  chmod(path.c_str(), mode);
}

TEST(JobFile, IsPrivateFoundWhileItsProcessRunsAndGoneAfter) {
  Dir d;
  std::string path;
  {
    JobFile f(me(), d.dir());
    path = f.path();
    struct stat st {};
    ASSERT_EQ(stat(d.dir().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0700u);
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    std::vector<std::string> warnings;
    auto jobs = running_jobs(warnings, d.dir());
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].run_id, "job-a");
    EXPECT_EQ(jobs[0].endpoint, "127.0.0.1:1234");
    EXPECT_EQ(jobs[0].auth.token, "tok-0123456789abcdef");
    EXPECT_EQ(jobs[0].pid, getpid());
    EXPECT_TRUE(warnings.empty());
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(JobFile, FilesOfProcessesThatAreGoneAreRemoved) {
  Dir d;
  { JobFile f(me(), d.dir()); }  // makes the folder
  const pid_t child = fork();
  if (child == 0) _exit(0);
  const std::string start = process_start_time(child);  // a zombie still has one
  waitpid(child, nullptr, 0);
  const std::string stale = d.dir() + "/job-" + std::to_string(child);
  std::ofstream(stale) << "run_id=old\nendpoint=127.0.0.1:1\ntoken=\npid=" << child
                       << "\nstart_time=" << start << "\n";
  chmod(stale.c_str(), 0600);
  // A live pid with another start time: the pid was reused, the job is gone.
  const std::string reused = d.dir() + "/job-1";
  std::ofstream(reused) << "run_id=reused\nendpoint=127.0.0.1:1\ntoken=\npid=1\nstart_time=12345\n";
  chmod(reused.c_str(), 0600);
  std::vector<std::string> warnings;
  EXPECT_TRUE(running_jobs(warnings, d.dir()).empty());
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(reused));
}

TEST(JobFile, FilesOthersCouldReadOrWriteOrThatAreLinksAreNotTrusted) {
  Dir d;
  { JobFile f(me(), d.dir()); }
  plant(d.dir() + "/job-world-readable", getpid(), 0644);
  const fs::path target = d.root / "elsewhere";
  plant(target.string(), getpid(), 0600);
  fs::create_symlink(target, d.dir() + "/job-link");
  std::vector<std::string> warnings;
  EXPECT_TRUE(running_jobs(warnings, d.dir()).empty());
  ASSERT_EQ(warnings.size(), 2u);
  for (const auto& w : warnings) EXPECT_TRUE(ddptest::contains(w, "skipping")) << w;
}

TEST(JobFile, AFileOfAnotherUserIsNotTrusted) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a file away";
  Dir d;
  { JobFile f(me(), d.dir()); }
  const std::string path = d.dir() + "/job-planted";
  plant(path, getpid(), 0600);
  ASSERT_EQ(chown(path.c_str(), 12345, 12345), 0);
  std::vector<std::string> warnings;
  EXPECT_TRUE(running_jobs(warnings, d.dir()).empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(ddptest::contains(warnings[0], "owned by uid 12345")) << warnings[0];
}

TEST(JobFile, AFolderThatIsALinkOpenToOthersOrNotOursIsRefused) {
  Dir d;
  // A link where the folder should be (planted in /tmp before our first run).
  const fs::path real = d.root / "real";
  fs::create_directories(real);
  chmod(real.c_str(), 0700);
  fs::create_symlink(real, d.dir());
  std::vector<std::string> warnings;
  EXPECT_THROW(running_jobs(warnings, d.dir()), std::runtime_error);
  EXPECT_THROW(JobFile(me(), d.dir()), std::runtime_error);
  EXPECT_TRUE(fs::is_empty(real));
  fs::remove(d.dir());
  // A folder others may write in.
  fs::create_directories(d.dir());
  chmod(d.dir().c_str(), 0777);
  EXPECT_THROW(running_jobs(warnings, d.dir()), std::runtime_error);
  EXPECT_THROW(JobFile(me(), d.dir()), std::runtime_error);
  if (geteuid() == 0) {
    chmod(d.dir().c_str(), 0700);
    ASSERT_EQ(chown(d.dir().c_str(), 12345, 12345), 0);
    EXPECT_THROW(running_jobs(warnings, d.dir()), std::runtime_error);
    EXPECT_THROW(JobFile(me(), d.dir()), std::runtime_error);
  }
}

// `ddprun status` sends a job's token only where that job's own ddprun
// listens in this network namespace: here, this test process stands for
// the ddprun, with a listening socket of its own.
TEST(JobFile, ATokenGoesOnlyToASocketItsOwnDdprunListensOnInThisNamespace) {
  ddptest::LoopbackListener listener;
  ASSERT_FALSE(listener.address().empty());
  JobFileEntry e = me();
  e.endpoint = listener.address();
  EXPECT_EQ(why_not_contacted(e), "");
  // Another namespace's loopback is not ours: whoever listens here is not it.
  JobFileEntry elsewhere = e;
  elsewhere.netns = "net:[1]";
  EXPECT_NE(why_not_contacted(elsewhere).find("runs in another network namespace"), std::string::npos);
  JobFileEntry old_file = e;
  old_file.netns = "";  // written before files said their namespace: unproven
  EXPECT_NE(why_not_contacted(old_file), "");
  // A port its ddprun does not listen on (another host's rendezvous, or
  // another process's port now).
  listener.close();
  EXPECT_NE(why_not_contacted(e).find("not served by its ddprun"), std::string::npos);
}

TEST(JobFile, NoFolderMeansNoJobs) {
  Dir d;
  std::vector<std::string> warnings;
  EXPECT_TRUE(running_jobs(warnings, d.dir()).empty());
}

}  // namespace
}  // namespace ddprun
