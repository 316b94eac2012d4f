// Writing a whole file so that readers see either the old file or the new
// one, never a part: write a temporary file, check every write, fsync,
// close, rename over the final name, fsync the folder. No LibTorch here.
//
//   ddp::write_file_atomically(path, path + ".tmp", bytes.data(), bytes.size());
//
// or, when the bytes come in pieces (and the final name may depend on them):
//
//   ddp::AtomicFileWriter out(dir + "/.part.tmp");
//   out.write(header, 16); out.write(body, n);
//   out.commit(dir + "/" + name_from(checksum));
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ddp {

// Writes n bytes to temp_path (same folder as final_path), then renames it
// to final_path. On any failure the temporary file is removed, final_path is
// left as it was, and std::runtime_error says which step failed on which
// file with the OS error ("... No space left on device").
void write_file_atomically(const std::string& final_path, const std::string& temp_path, const void* data,
                           size_t n);

// The same in pieces. Small writes are gathered into a buffer of its own;
// large ones go to the file as they are. The temporary file is removed
// unless commit() succeeded, also when the writer is destroyed by an
// exception. Every failing call throws as write_file_atomically does.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string temp_path);  // creates (truncates) it
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);
  // Flushes, fsyncs and closes the temporary file, renames it to final_path
  // (in the same folder) and fsyncs the folder.
  void commit(const std::string& final_path);

 private:
  void flush();
  void write_out(const char* p, size_t n);
  void fail(const char* step, int err);  // removes the file, throws

  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  std::vector<char> buffer_;
};

}  // namespace ddp
