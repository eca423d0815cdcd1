// The one translation unit that compiles Asio and Beast. Every other file that includes them
// sees BOOST_ASIO_SEPARATE_COMPILATION and BOOST_BEAST_SEPARATE_COMPILATION (from asio_dep) and
// only declares, so two cores do not rebuild the whole of Asio for each file.
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
