#include "replication/cell_crypto.h"

#include <openssl/crypto.h>

#include "base/coding.h"
#include "base/crypto.h"
#include "base/strings.h"

namespace megastore::replication {

namespace {

constexpr char kFormat = '\x01';
constexpr char kLocalIndexRow = '\x02';  // schema::Layout's local index entries
constexpr size_t kTokenBytes = 16;
constexpr uint8_t kHasRow = 1, kHasQualifier = 2;

bool HoldsValues(std::string_view qualifier) {
  return qualifier.find(':') != std::string_view::npos;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const GroupCipher>> GroupCipher::Create(std::string_view secret,
                                                                       std::string table,
                                                                       std::string root) {
  if (secret.size() != crypto::kKeyBytes)
    return absl::InvalidArgumentError(
        StrCat("a group secret has ", crypto::kKeyBytes, " bytes, not ", secret.size()));
  // The group's identity, hashed: HKDF's info is bounded (root keys may
  // be long), a digest is not.
  std::string identity;
  PutLengthPrefixed(&identity, table);
  PutLengthPrefixed(&identity, root);
  const std::string context = crypto::Sha256(identity);
  absl::StatusOr<std::string> cell =
      crypto::HkdfSha256(secret, "", "megastore cell key v1|" + context, crypto::kKeyBytes);
  if (!cell.ok()) return cell.status();
  absl::StatusOr<std::string> token =
      crypto::HkdfSha256(secret, "", "megastore token key v1|" + context, crypto::kKeyBytes);
  if (!token.ok()) return token.status();
  absl::StatusOr<crypto::AesGcm> cell_key = crypto::AesGcm::Create(*cell);
  OPENSSL_cleanse(cell->data(), cell->size());
  if (!cell_key.ok()) return cell_key.status();
  return std::shared_ptr<const GroupCipher>(
      new GroupCipher(std::move(table), std::move(root), std::move(*cell_key), std::move(*token)));
}

size_t GroupCipher::TokenPrefix(std::string_view row) const {
  if (row.size() <= root_.size() || row.compare(0, root_.size(), root_) != 0 ||
      row[root_.size()] != kLocalIndexRow)
    return 0;
  std::string_view rest = row.substr(root_.size() + 1);
  std::string index;
  if (!ConsumeOrderedBytes(&rest, &index))
    return root_.size() + 1;  // not the layout's: hide all of it
  return row.size() - rest.size();
}

bool GroupCipher::TokenizedRow(std::string_view row) const { return TokenPrefix(row) != 0; }
std::string GroupCipher::TokenizedStart() const { return root_ + std::string(1, kLocalIndexRow); }
std::string GroupCipher::TokenizedEnd() const { return root_ + std::string(1, kLocalIndexRow + 1); }

storage::RowRange GroupCipher::TokenizedRange(std::string_view start, std::string_view end) const {
  // One index's entries share their clear prefix root 02 <index>.
  const size_t prefix = TokenPrefix(start);
  if (prefix > root_.size() + 1) {
    std::string from(start.substr(0, prefix));
    std::string to = PrefixSuccessor(from);
    if (!to.empty() && end <= to) return storage::RowRange{from, to};
  }
  return storage::RowRange{TokenizedStart(), TokenizedEnd()};
}

std::string GroupCipher::StoredRow(std::string_view row) const {
  const size_t prefix = TokenPrefix(row);
  if (prefix == 0) return std::string(row);
  std::string out(row.substr(0, prefix));
  out += crypto::HmacSha256(token_key_, StrCat("row|", row)).substr(0, kTokenBytes);
  return out;
}

std::string GroupCipher::StoredQualifier(std::string_view qualifier) const {
  if (!HoldsValues(qualifier)) return std::string(qualifier);
  return ":" +
         crypto::HmacSha256(token_key_, StrCat("qualifier|", qualifier)).substr(0, kTokenBytes);
}

std::string GroupCipher::Aad(std::string_view row, std::string_view family,
                             std::string_view qualifier, int64_t timestamp) const {
  std::string aad = "megastore cell v1";
  PutLengthPrefixed(&aad, table_);
  PutLengthPrefixed(&aad, row);
  PutLengthPrefixed(&aad, family);
  PutLengthPrefixed(&aad, qualifier);
  PutFixed64(&aad, static_cast<uint64_t>(timestamp));
  return aad;
}

absl::StatusOr<std::string> GroupCipher::Seal(std::string_view payload,
                                              std::string_view aad) const {
  std::string out(1, kFormat);
  const std::string nonce = crypto::RandomBytes(crypto::kNonceBytes);
  out += nonce;
  if (absl::Status s = cell_key_.Seal(nonce, payload, aad, &out); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::string> GroupCipher::Open(std::string_view sealed, std::string_view aad) const {
  if (sealed.empty()) return absl::DataLossError("the cell is empty, not sealed");
  if (sealed[0] != kFormat)
    return absl::DataLossError(StrCat("the cell is not sealed in a known format (first byte ",
                                      static_cast<int>(static_cast<unsigned char>(sealed[0])),
                                      ")"));
  if (sealed.size() < 1 + crypto::kNonceBytes + crypto::kTagBytes)
    return absl::DataLossError(StrCat("the sealed cell is truncated (", sealed.size(), " bytes)"));
  absl::StatusOr<std::string> plain = cell_key_.Open(sealed.substr(1, crypto::kNonceBytes),
                                                     sealed.substr(1 + crypto::kNonceBytes), aad);
  if (absl::IsDataLoss(plain.status()))
    return absl::DataLossError(
        "it does not open under the group's key: altered, moved from another "
        "cell, or sealed under another key");
  return plain;
}

absl::Status GroupCipher::Damaged(std::string_view row, std::string_view family,
                                  std::string_view qualifier, int64_t timestamp,
                                  std::string_view why) const {
  return absl::DataLossError(StrCat("encrypted cell of table ", table_, " row ", EscapeBytes(row),
                                    " column ", family, ":", EscapeBytes(qualifier),
                                    " at timestamp ", timestamp, ": ", why));
}

absl::StatusOr<std::string> GroupCipher::SealCell(std::string_view row, std::string_view family,
                                                  std::string_view qualifier, int64_t timestamp,
                                                  std::string_view value) const {
  const std::string stored_row = StoredRow(row), stored_qualifier = StoredQualifier(qualifier);
  std::string payload(1, '\0');
  uint8_t flags = 0;
  if (stored_row != row) {
    flags |= kHasRow;
    PutLengthPrefixed(&payload, row);
  }
  if (stored_qualifier != qualifier) {
    flags |= kHasQualifier;
    PutLengthPrefixed(&payload, qualifier);
  }
  payload[0] = static_cast<char>(flags);
  payload.append(value);
  return Seal(payload, Aad(stored_row, family, stored_qualifier, timestamp));
}

absl::StatusOr<GroupCipher::Opened> GroupCipher::OpenCell(std::string_view stored_row,
                                                          std::string_view family,
                                                          std::string_view stored_qualifier,
                                                          int64_t timestamp,
                                                          std::string_view sealed) const {
  absl::StatusOr<std::string> plain =
      Open(sealed, Aad(stored_row, family, stored_qualifier, timestamp));
  if (!plain.ok())
    return Damaged(stored_row, family, stored_qualifier, timestamp,
                   std::string(plain.status().message()));
  std::string_view in = *plain;
  if (in.empty())
    return Damaged(stored_row, family, stored_qualifier, timestamp, "its payload is empty");
  const uint8_t flags = static_cast<uint8_t>(in[0]);
  in.remove_prefix(1);
  Opened out;
  std::string_view row = stored_row, qualifier = stored_qualifier;
  if ((flags & ~(kHasRow | kHasQualifier)) != 0 ||
      ((flags & kHasRow) && !ConsumeLengthPrefixed(&in, &row)) ||
      ((flags & kHasQualifier) && !ConsumeLengthPrefixed(&in, &qualifier)))
    return Damaged(stored_row, family, stored_qualifier, timestamp, "its payload is malformed");
  // The plaintext coordinates must be the ones that are stored here.
  if (StoredRow(row) != stored_row || StoredQualifier(qualifier) != stored_qualifier)
    return Damaged(stored_row, family, stored_qualifier, timestamp,
                   "its coordinates do not match where it is stored");
  out.row = std::string(row);
  out.qualifier = std::string(qualifier);
  // The value is the payload's tail: keep the buffer, drop the head.
  plain->erase(0, plain->size() - in.size());
  out.value = std::move(*plain);
  return out;
}

absl::StatusOr<std::string> GroupCipher::SealLog(std::string_view qualifier, std::string_view value,
                                                 std::string_view binding) const {
  std::string aad = Aad(root_, "p", qualifier, 0);
  PutLengthPrefixed(&aad, binding);
  return Seal(value, aad);
}

absl::StatusOr<std::string> GroupCipher::OpenLog(std::string_view qualifier,
                                                 std::string_view sealed,
                                                 std::string_view binding) const {
  std::string aad = Aad(root_, "p", qualifier, 0);
  PutLengthPrefixed(&aad, binding);
  absl::StatusOr<std::string> plain = Open(sealed, aad);
  if (!plain.ok()) return Damaged(root_, "p", qualifier, 0, std::string(plain.status().message()));
  return plain;
}

std::string GroupCipher::BackupAad(std::string_view binding) const {
  std::string aad = "megastore backup v1";
  PutLengthPrefixed(&aad, table_);
  PutLengthPrefixed(&aad, root_);
  PutLengthPrefixed(&aad, binding);
  return aad;
}

absl::StatusOr<std::string> GroupCipher::SealBackup(std::string_view binding,
                                                    std::string_view payload) const {
  return Seal(payload, BackupAad(binding));
}

absl::StatusOr<std::string> GroupCipher::OpenBackup(std::string_view binding,
                                                    std::string_view sealed) const {
  absl::StatusOr<std::string> plain = Open(sealed, BackupAad(binding));
  if (!plain.ok())
    return absl::DataLossError(StrCat("a sealed backup piece of entity group ", EscapeBytes(root_),
                                      " of table ", table_, " (", EscapeBytes(binding),
                                      "): ", plain.status().message()));
  return plain;
}

}  // namespace megastore::replication
