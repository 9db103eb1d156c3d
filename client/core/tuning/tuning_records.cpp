#include "client/core/tuning/tuning_records.h"

#include <cstdlib>
#include <map>

#include "client/core/api/invalid_argument.h"
#include "client/core/loader/loader_log.h"
#include "client/core/rpc/client_settings.h"
#include "client/core/tuning/daemon_tuning.h"
#include "client/core/tuning/tuning_daemon_store.h"
#include "client/core/tuning/tuning_file_store.h"
#include "proto/tuning_checks.h"

namespace kiln::client {
namespace {

void LoaderLine(const std::string& line) {
  if (LoaderLogEnabled()) WriteLoaderLine(line);
}

// INVALID_ARGUMENT unless `value` of KILN_TUNING_FILE names a file in an existing folder.
Status CheckTuningFile(const std::string& value) {
  if (value.empty() || value[0] != '/')
    return InvalidArgument(std::string(kTuningFileEnv) + "='" + value +
                           "' must be an absolute path (every process of the node must mean the same file)");
  if (value.back() == '/')
    return InvalidArgument(std::string(kTuningFileEnv) + "='" + value + "' names a folder; name the file to keep");
  return OkStatus();
}

}  // namespace

TuningRecords::TuningRecords(std::unique_ptr<TuningStore> store, std::string why_none,
                             std::function<void(const std::string&)> log)
    : store_(std::move(store)), why_none_(std::move(why_none)), log_(std::move(log)) {}

std::string TuningRecords::Describe() const { return store_ != nullptr ? store_->Describe() : "nowhere: " + why_none_; }

void TuningRecords::SayNoStoreOnce() {
  std::lock_guard<std::mutex> lock(mu_);
  if (said_no_store_) return;
  said_no_store_ = true;
  log_("[kiln loader] tuning results are not kept and none are reused: " + why_none_);
}

StatusOr<std::optional<TuningRecord>> TuningRecords::Lookup(std::string_view op, std::string_view bucket,
                                                            const TuningEnvironment& environment) {
  if (auto p = proto::OpNameProblem("op", op); !p.empty()) return InvalidArgument(p);
  if (auto p = proto::BucketProblem("bucket", bucket); !p.empty()) return InvalidArgument(p);
  if (store_ == nullptr) {
    SayNoStoreOnce();
    return std::optional<TuningRecord>();
  }
  KILN_ASSIGN_OR_RETURN(TuningLookup found, store_->Lookup(std::string(op), std::string(bucket), environment));
  if (!found.record && !found.mismatch.empty()) {
    const std::string key = std::string(op) + "\n" + std::string(bucket);
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = said_mismatch_.insert(key).second;
    }
    if (first)
      log_("[kiln loader] tuning " + std::string(op) + " " + std::string(bucket) + ": not reused from " +
           store_->Describe() + ": " + found.mismatch);
  }
  return std::move(found.record);
}

Status TuningRecords::Store(const TuningRecord& record) {
  if (auto p = proto::TuningRecordProblem("record", record); !p.empty()) return InvalidArgument(p);
  if (store_ == nullptr) {
    SayNoStoreOnce();
    return OkStatus();
  }
  return store_->Put(record);
}

StatusOr<TuningRecords*> ProcessTuningRecords() {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<TuningRecords>> chosen;  // by daemon target
  const std::shared_ptr<const Settings> settings = CurrentSettings();
  const std::shared_ptr<const DaemonConnection> connection = settings->connection;
  const char* file = std::getenv(kTuningFileEnv);
  if (file != nullptr && *file == '\0') file = nullptr;  // set but empty: unset, like the other variables
  KILN_ASSIGN_OR_RETURN(bool embedded, settings->source->UseEmbedded());
  const std::string key = file != nullptr ? std::string("file:") + file : embedded ? "embedded" : connection->target();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = chosen.find(key); it != chosen.end()) return it->second.get();
  }
  std::unique_ptr<TuningStore> store;
  std::string why_none;
  if (file != nullptr) {
    KILN_RETURN_IF_ERROR(CheckTuningFile(file));
    store = std::make_unique<FileTuningStore>(file);
  } else {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const DaemonTuning> daemon, GetDaemonTuning());
    if (embedded) {
      why_none = std::string(
                     "this process compiles with its embedded engine (no kilnd, so no daemon tuning store) and ") +
                 kTuningFileEnv + " is not set";
    } else if (!daemon->has_service) {
      why_none = "kilnd at " + connection->target() + " has no TuningService (an older Kiln); set " + kTuningFileEnv;
    } else if (daemon->info.store_path().empty()) {
      why_none = "kilnd at " + connection->target() + " runs without a tuning store (kilnd --tuning-store PATH) and " +
                 kTuningFileEnv + " is not set";
    } else {
      store = std::make_unique<DaemonTuningStore>(connection, daemon->info.store_path());
    }
  }
  auto records = std::make_unique<TuningRecords>(std::move(store), why_none, LoaderLine);
  std::lock_guard<std::mutex> lock(mu);
  return chosen.emplace(key, std::move(records)).first->second.get();
}

StatusOr<std::optional<TuningRecord>> LookupTuning(std::string_view op, std::string_view bucket,
                                                   const TuningEnvironment& environment) {
  KILN_ASSIGN_OR_RETURN(TuningRecords * records, ProcessTuningRecords());
  return records->Lookup(op, bucket, environment);
}

Status StoreTuning(const TuningRecord& record) {
  KILN_ASSIGN_OR_RETURN(TuningRecords * records, ProcessTuningRecords());
  return records->Store(record);
}

StatusOr<std::vector<BlockedTactic>> DaemonBlockedTactics() {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const DaemonTuning> daemon, GetDaemonTuning());
  return daemon->blocked;
}

StatusOr<std::string> TuningStoreDescription() {
  KILN_ASSIGN_OR_RETURN(TuningRecords * records, ProcessTuningRecords());
  return records->Describe();
}

}  // namespace kiln::client
