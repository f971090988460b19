// Asio's implementation, compiled once for the whole project (ASIO_SEPARATE_COMPILATION): every
// other file that includes Asio compiles only its headers' declarations.
#include <asio/impl/src.hpp>
