! The acoustic example's forward and backward passes in Fortran, through the adjsnapd module: a
! 2D acoustic wave propagates forward, every wavefield pushed to adjsnapd; the backward pass
! fetches them in reverse order, checks each is bit for bit the one pushed, and sums their
! energy into an image (where reverse-time migration would correlate them with a receiver field).
!
!   acoustic_test SOCKET      exit status 0 when every step came back byte-exact
program acoustic_test
  use, intrinsic :: iso_c_binding
  use adjsnap
  implicit none
  integer, parameter :: nx = 96, ny = 64, nt = 40
  integer(c_int64_t), parameter :: nbytes = int(nx, c_int64_t) * ny * 4
  real(c_float), allocatable :: u0(:, :), u1(:, :), u2(:, :), fwd(:, :), image(:, :)
  real(c_float), allocatable :: sent(:, :, :)
  real(c_float) :: vel2
  type(c_ptr) :: client
  integer(c_int64_t) :: run, t
  character(len=256) :: socket
  integer :: rc, ix, iy, bad

  call get_command_argument(1, socket)
  rc = adjsnap_connect(client, socket)
  call check(rc, "connect")
  rc = adjsnap_open_run(client, "fortran-acoustic", int(nt, c_int64_t), nbytes, adjsnap_float32, run)
  call check(rc, "open run")

  allocate (u0(nx, ny), u1(nx, ny), u2(nx, ny), fwd(nx, ny), image(nx, ny), sent(nx, ny, nt))
  u0 = 0; u1 = 0; image = 0
  vel2 = 0.2
  u1(nx / 2, ny / 4) = 1  ! the source
  do t = 0, nt - 1  ! forward: one push per step; the buffer is reused once released
    u2 = 0
    do iy = 2, ny - 1
      do ix = 2, nx - 1
        u2(ix, iy) = 2 * u1(ix, iy) - u0(ix, iy) + vel2 * (u1(ix + 1, iy) + u1(ix - 1, iy) &
                     + u1(ix, iy + 1) + u1(ix, iy - 1) - 4 * u1(ix, iy))
      end do
    end do
    sent(:, :, t + 1) = u2
    if (mod(t, 2_c_int64_t) == 0) then
      rc = adjsnap_push(client, run, t, u2, nbytes, adjsnap_wait_released)
    else  ! with a wait limit of its own, in seconds
      rc = adjsnap_push(client, run, t, u2, nbytes, adjsnap_wait_released, timeout=60.0_c_double)
    end if
    call check(rc, "push")
    u0 = u1
    u1 = u2
  end do

  bad = 0
  do t = nt - 1, 0, -1  ! backward: read-once fetches in reverse order
    rc = adjsnap_fetch(client, run, t, fwd, nbytes)
    call check(rc, "fetch")
    if (any(transfer(fwd, 1_c_int32_t, nx * ny) /= transfer(sent(:, :, t + 1), 1_c_int32_t, &
                                                             nx * ny))) then
      print '(a, i0, a)', "step ", t, " came back different"
      bad = bad + 1
    end if
    image = image + fwd * fwd
  end do
  rc = adjsnap_delete_run(client, "fortran-acoustic")
  call check(rc, "delete run")
  call adjsnap_disconnect(client)
  if (bad /= 0) error stop 1
  print '(a, i0, a, es10.3)', "fortran: ", nt, " steps pushed and fetched byte-exact; image norm ", &
    sqrt(sum(real(image, c_double)**2))
  deallocate (u0, u1, u2, fwd, image, sent)

contains

  subroutine check(rc, what)
    integer, intent(in) :: rc
    character(*), intent(in) :: what
    if (rc /= adjsnap_ok) then
      print '(a, a, a, a)', what, ": ", adjsnap_last_error()
      error stop 1
    end if
  end subroutine check

end program acoustic_test
