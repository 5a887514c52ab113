#include "base/tls/certs.h"

#include <sys/stat.h>

#include <ctime>
#include <filesystem>

#include "base/file.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace megastore::tls {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

int Mode(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 0777) : -1;
}

TEST(Certs, ACaIssuesCertificatesThatVerifyAgainstItOnly) {
  TestDir dir;
  const std::string ca = dir.path() + "/ca";
  ASSERT_TRUE(CreateCa(ca, "megastore test CA").ok());
  EXPECT_EQ(Mode(ca + "/ca.key"), 0600);
  EXPECT_EQ(Mode(ca), 0700);
  CertificateRequest r;
  r.common_name = "datacenter-A";
  r.hosts = {"127.0.0.1", "localhost", "::1"};
  ASSERT_TRUE(IssueCertificate(ca, dir.path() + "/certs", "A", r).ok());
  EXPECT_EQ(Mode(dir.path() + "/certs/A.key"), 0600);
  EXPECT_TRUE(VerifyCertificate(ca + "/ca.crt", dir.path() + "/certs/A.crt").ok());

  absl::StatusOr<CertificateInfo> info = ReadCertificateInfo(dir.path() + "/certs/A.crt");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->subject_common_name, "datacenter-A");
  EXPECT_EQ(info->issuer_common_name, "megastore test CA");
  EXPECT_THAT(info->hosts, ElementsAre("127.0.0.1", "localhost", "::1"));
  const int64_t now = std::time(nullptr);
  EXPECT_LE(info->not_before_unix, now);
  EXPECT_GT(info->not_after_unix, now + 800LL * 86400);

  // Another CA's certificate does not verify against this one.
  const std::string other = dir.path() + "/other";
  ASSERT_TRUE(CreateCa(other, "another CA").ok());
  ASSERT_TRUE(IssueCertificate(other, dir.path() + "/certs", "intruder", r).ok());
  absl::Status s = VerifyCertificate(ca + "/ca.crt", dir.path() + "/certs/intruder.crt");
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("unable to get local issuer certificate"));
}

TEST(Certs, NothingIsOverwrittenAndBadInputIsRefusedByName) {
  TestDir dir;
  const std::string ca = dir.path() + "/ca";
  ASSERT_TRUE(CreateCa(ca, "CA").ok());
  EXPECT_TRUE(absl::IsAlreadyExists(CreateCa(ca, "CA")));
  CertificateRequest r;
  r.common_name = "x";
  ASSERT_TRUE(IssueCertificate(ca, dir.path(), "x", r).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(IssueCertificate(ca, dir.path(), "x", r)));
  EXPECT_THAT(IssueCertificate(ca, dir.path(), "../evil", r).message(),
              HasSubstr("not a certificate name"));
  EXPECT_THAT(IssueCertificate(ca, dir.path(), "ca", r).message(),
              HasSubstr("not a certificate name"));
  r.hosts = {"bad host!"};
  EXPECT_THAT(IssueCertificate(ca, dir.path(), "y", r).message(),
              HasSubstr("neither an IP address"));
  r.hosts = {};
  r.common_name = std::string(65, 'a');
  EXPECT_THAT(IssueCertificate(ca, dir.path(), "y", r).message(), HasSubstr("1 to 64 bytes"));
  r.common_name = "y";
  r.days = 0;
  EXPECT_THAT(IssueCertificate(ca, dir.path(), "y", r).message(), HasSubstr("1 to 36500 days"));
  // A CA directory whose key does not match its certificate.
  ASSERT_TRUE(CreateCa(dir.path() + "/ca2", "CA2").ok());
  std::filesystem::copy_file(dir.path() + "/ca2/ca.key", ca + "/ca.key",
                             std::filesystem::copy_options::overwrite_existing);
  r.days = 10;
  EXPECT_THAT(IssueCertificate(ca, dir.path(), "z", r).message(), HasSubstr("is not the key of"));
  // Garbage where a certificate should be.
  ASSERT_TRUE(WriteFileAtomically(dir.path() + "/junk.crt", "not a certificate").ok());
  EXPECT_THAT(ReadCertificateInfo(dir.path() + "/junk.crt").status().message(),
              HasSubstr("no PEM certificate"));
  EXPECT_FALSE(ReadCertificateInfo(dir.path() + "/missing.crt").ok());
}

}  // namespace
}  // namespace megastore::tls
